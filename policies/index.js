// The file the engine loads: `pulumi-analyzer-policy` runs @pulumi/pulumi/cmd/run-policy-pack, which
// require()s this directory after registering ts-node for `.ts` files. A `.ts` entry would be
// compiled (and type-checked) by that ts-node, which rejects our `.ts` import specifiers; an ES
// module entry is loaded by require(esm) instead, and its imports by Node's own type stripping.
import "./index.ts";
