# Where each candidate job's status.json is (`job<TAB>path<TAB>last signature` lines on stdin, `path` the
# file at the top of its results directory), for all of them at once. TAO's trainers write theirs in
# their output directory, `<results>/<dir>/<action>/status.json`: where the top one does not exist, the
# job's first @SUBDIRS@ subdirectories and the first @SUBDIRS@ of each are looked in, by glob (no `find`
# over what the job wrote), only names of letters, digits, `._-` and never through a symlink. Prints the
# candidates (`P<TAB>job<TAB>old<TAB>rel<TAB>path`, rel `-` for the top), then `stat`'s `size:mtime<TAB>path`
# of those that are regular files (one `find`: FIFOs and symlinks left out).
LC_ALL=C; shopt -s nullglob
n='^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$'; paths=()
while IFS=$'\t' read -r j f g; do
  printf 'P\t%s\t%s\t-\t%s\n' "$j" "$g" "$f"; paths+=("$f")
  d=${f%/*}
  { [ -e "$f" ] || [ -L "$f" ] || [ -L "$d" ] || [ ! -d "$d" ]; } && continue
  k=0
  for a in "$d"/*/; do
    a=${a%/}; [[ ${a##*/} =~ $n ]] && [ ! -L "$a" ] || continue
    k=$((k + 1)); [ "$k" -le @SUBDIRS@ ] || break
    printf 'P\t%s\t%s\t%s\t%s\n' "$j" "$g" "${a##*/}" "$a/status.json"; paths+=("$a/status.json")
    m=0
    for b in "$a"/*/; do
      b=${b%/}; [[ ${b##*/} =~ $n ]] && [ ! -L "$b" ] || continue
      m=$((m + 1)); [ "$m" -le @SUBDIRS@ ] || break
      printf 'P\t%s\t%s\t%s\t%s\n' "$j" "$g" "${a##*/}/${b##*/}" "$b/status.json"; paths+=("$b/status.json")
    done
  done
done
[ "${#paths[@]}" -gt 0 ] && printf '%s\0' "${paths[@]}" | xargs -0 -r sh -c 'find "$@" -maxdepth 0 -type f -printf "%s:%Ts\t%p\n"' find 2>/dev/null
exit 0
