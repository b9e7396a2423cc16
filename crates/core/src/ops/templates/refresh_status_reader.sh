# Reads `job<TAB>path<TAB>sig` lines and prints the last lines of each file's last 64 KiB in a section.
# A file `find` saw small is read by bash builtins, at most @SMALL_STATUS_JSON@ + 1 bytes from its one
# open (a file grown or swapped since `find` looked is never read whole: it goes to `tail`); a larger
# one by `tail`, which reads only its end. A file below the results directory (its signature `size:mtime:rel`
# names where) is read only if neither directory on its way there is a link.
LC_ALL=C
while IFS=$'\t' read -r j f g; do [ -L "$f" ] && continue
case $g in *:*:*) p=${f%/*}; { [ -L "$p" ] || [ -L "${p%/*}" ]; } && continue;; esac; echo "@SECTION@status_json $j $g"
b=; [ "${g%%:*}" -le @SMALL_STATUS_JSON@ ] && { IFS= read -r -d '' -N @SMALL_READ@ b < "$f"; } 2>/dev/null
if [ -n "$b" ] && [ "${#b}" -le @SMALL_STATUS_JSON@ ]; then [ "${#b}" -gt 65536 ] && b=${b: -65536}; b=${b%$'\n'}
mapfile -t l <<<"$b"; n=${#l[@]}; printf '|%s\n' "${l[@]:$(( n > @TAIL_LINES@ ? n - @TAIL_LINES@ : 0 ))}"
else tail -c 65536 -- "$f" | tail -n @TAIL_LINES@ | @PREFIX_LINES@; fi
done
