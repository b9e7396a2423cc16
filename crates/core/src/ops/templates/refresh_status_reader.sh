# Reads `job<TAB>path<TAB>sig` lines and prints each file's last lines in a section: small files by
# bash builtins, larger ones from their last 64 KiB only (a file of one endless line costs no more).
while IFS=$'\t' read -r j f g; do [ -L "$f" ] && continue; echo "@SECTION@status_json $j $g"
if [ "${g%%:*}" -le @SMALL_STATUS_JSON@ ]; then mapfile -t l < "$f"; n=${#l[@]}; [ "$n" -gt 0 ] && printf '|%s\n' "${l[@]:$(( n > @TAIL_LINES@ ? n - @TAIL_LINES@ : 0 ))}"
else tail -c 65536 -- "$f" | tail -n @TAIL_LINES@ | @PREFIX_LINES@; fi
done
