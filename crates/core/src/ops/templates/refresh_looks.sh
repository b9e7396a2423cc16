# The newest checkpoint and the starts record of running jobs that resume, for all of them at once:
# one `find` over their results directories (the checkpoints by their patterns, and each starts record
# with its size), one awk that keeps each directory's newest checkpoint, and one bash that reads the
# starts records of at most @STARTS_MAX@ bytes by builtins (their last @STARTS_LINES@ lines; `find -type f`
# left out FIFOs and symlinks, the time limit bounds a file swapped for one in between; at most
# @STARTS_MAX@ + 1 bytes are read from the one open, so a record grown or swapped since `find` gave its
# size is left out, never read whole). The job list
# (`dir/<TAB>job`) travels as a heredoc.
find @DIRS@ -mindepth 1 -maxdepth @DEPTH@ ! -name $'*\n*' \( \( @KINDS@ \) -printf 'C\t%H\t%T@\t%p\n' -o -path '*/@STARTS_PATH@' -type f -printf 'S\t%H\t%s\t%p\n' \) 2>/dev/null |
awk -F'\t' 'NR == FNR { job[$1] = $2; next } $1 == "C" { if (!($2 in t) || $3 + 0 > t[$2]) { t[$2] = $3 + 0; p[$2] = $4 }; next } $1 == "S" && $3 + 0 <= @STARTS_MAX@ { s[$2] = $4 } END { for (d in p) print "C\t" job[d] "\t" p[d]; for (d in s) print "S\t" job[d] "\t" s[d] }' /dev/fd/3 - 3<<'TAO_SLURM_LOOKS' |
@LIST@TAO_SLURM_LOOKS
timeout @READ_SECS@ bash -c 'LC_ALL=C; while IFS=$'"'"'\t'"'"' read -r k j f; do if [ "$k" = C ]; then echo "@SECTION@checkpoint $j $f"; else [ -L "$f" ] || [ -L "${f%/*}" ] && continue; b=; IFS= read -r -d "" -N @STARTS_READ@ b < "$f" 2>/dev/null; [ "${#b}" -le @STARTS_MAX@ ] || continue; echo "@SECTION@starts $j"; b=${b%$'"'"'\n'"'"'}; [ -n "$b" ] || continue; mapfile -t l <<<"$b"; n=${#l[@]}; [ "$n" -gt 0 ] && printf "|%s\n" "${l[@]:$(( n > @STARTS_LINES@ ? n - @STARTS_LINES@ : 0 ))}"; fi; done'
