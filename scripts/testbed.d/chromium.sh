# shellcheck shell=bash
# Debian's Chromium for the browser tests (playwright-core drives /usr/bin/chromium; it never
# downloads a browser of its own).
tb_chromium_up() {
  tb_apt_install chromium
  # (Debian's wrapper script may complain about this sandbox's memory size on stderr; harmless.)
  /usr/bin/chromium --version >/dev/null 2>&1
}
