# fixtures.sh - sourced by the shell tests: sets $fx to the first folder of
# $COSMOS3_FIXTURES (a ':' list: the user's, then meson's -Dfixtures) that
# holds tiny-a, else to "" (the test then skips, saying so).
fx=""
IFS=: read -ra _fx_dirs <<< "${COSMOS3_FIXTURES:-}"
for _d in "${_fx_dirs[@]}"; do
    if [ -f "$_d/tiny-a/model/model_index.json" ]; then fx=$_d; break; fi
done
unset _d _fx_dirs
