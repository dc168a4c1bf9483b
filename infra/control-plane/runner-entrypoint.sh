#!/bin/sh
# Start of the runner pod (infra/control-plane/control-plane.ts runs it with the image's busybox sh).
#
# The root file system is read-only, but the runner's Pulumi project must be writable and lasting:
# the Automation API writes each session stack's settings (Pulumi.<stack>.yaml: spec and encrypted
# secrets) beside the project's Pulumi.yaml, and the runner needs them again after a restart. So the
# project lives on the runner's volume: the code is copied from the image on every start (an
# upgraded image brings its code), the stack settings files stay. PULUMI_HOME is writable there too,
# with the CLI and the Kubernetes plugin linked in from the image (no plugin is ever downloaded:
# PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION is set in the pod).
set -eu
state=${AGENT_SESSIONS_STATE_DIR:-/var/lib/agent-sessions}
app=/opt/agent-sessions
project=$state/project
mkdir -p "$project" "$state/runner" "$state/pulumi-home/plugins"
for entry in "$app"/*; do
  name=${entry##*/}
  [ "$name" = node_modules ] && continue
  rm -rf "${project:?}/$name"
  cp -R "$entry" "$project/$name"
done
ln -sfn "$app/node_modules" "$project/node_modules"
ln -sfn /opt/pulumi/bin "$state/pulumi-home/bin"
# The CLI only counts real directories under plugins/ as installed (a linked directory is not
# listed, and it would try a download): a directory per plugin, its files linked from the image.
for plugin in /opt/pulumi/plugins/*; do
  dir=$state/pulumi-home/plugins/${plugin##*/}
  rm -rf "$dir"
  mkdir -p "$dir"
  for file in "$plugin"/*; do ln -s "$file" "$dir/${file##*/}"; done
done
export PULUMI_HOME="$state/pulumi-home"
exec /bin/node "$project/bin/cli.ts" runner --engine kubernetes --data-dir "$state/runner"
