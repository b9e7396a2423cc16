# The GPU samples of each node of the running GPU jobs newer than the refresh had (`dir<TAB>job<TAB>node=at ...`
# lines on fd 3): in each sample directory (neither it nor its parent a link), at most @FILES@ regular files whose
# names are node names, at most @MAX@ bytes read from one open (a line the cap cuts is dropped), lines of at
# most @LINE@ bytes whose time is a number newer than the node's, at most @KEEP@ a node and @JOB@ bytes a job.
timeout @READ_SECS@ bash /dev/fd/4 4<<'TAO_SLURM_GPU_READER' 3<<'TAO_SLURM_GPU'
LC_ALL=C; shopt -s nullglob
while IFS=$'\t' read -r d j seen <&3; do
  [ -d "$d" ] && [ ! -L "$d" ] && [ ! -L "${d%/*}" ] || continue
  unset had; declare -A had; read -ra ps <<< "$seen"
  for p in "${ps[@]}"; do had[${p%%=*}]=${p#*=}; done
  k=0; bytes=0
  for f in "$d"/*; do
    n=${f##*/}
    [[ $n =~ ^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$ ]] || continue
    [ -f "$f" ] && [ ! -L "$f" ] || continue
    k=$((k + 1)); [ "$k" -le @FILES@ ] || break
    b=; IFS= read -r -d '' -N @MAX@ b < "$f" 2>/dev/null
    case $b in *$'\n'*) b=${b%$'\n'*} ;; *) continue ;; esac
    since=${had[$n]:-0}; o=; m=0
    while IFS= read -r l; do
      [ "${#l}" -le @LINE@ ] || continue
      a=${l#* }; a=${a%% *}
      [[ $a =~ ^[0-9]{1,12}$ ]] && [ "$a" -gt "$since" ] || continue
      o+="|$l"$'\n'; m=$((m + 1)); [ "$m" -lt @KEEP@ ] || break
    done <<< "$b"
    [ -n "$o" ] || continue
    bytes=$((bytes + ${#o})); [ "$bytes" -le @JOB@ ] || break
    echo "@SECTION@gpu $j $n"; printf '%s' "$o"
  done
done
TAO_SLURM_GPU_READER
@LIST@TAO_SLURM_GPU
