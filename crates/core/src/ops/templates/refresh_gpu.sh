# The newest GPU sample of each node of the running GPU jobs (`dir<TAB>job` lines on fd 3): in each
# sample directory (neither it nor its parent a link), at most @FILES@ regular files whose names are node names, at most
# @READ@ bytes read from one open (a larger file is left out), the first line of each.
timeout @READ_SECS@ bash /dev/fd/4 4<<'TAO_SLURM_GPU_READER' 3<<'TAO_SLURM_GPU'
LC_ALL=C; shopt -s nullglob
while IFS=$'\t' read -r d j <&3; do
  [ -d "$d" ] && [ ! -L "$d" ] && [ ! -L "${d%/*}" ] || continue
  k=0
  for f in "$d"/*; do
    n=${f##*/}
    [[ $n =~ ^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$ ]] || continue
    [ -f "$f" ] && [ ! -L "$f" ] || continue
    k=$((k + 1)); [ "$k" -le @FILES@ ] || break
    b=; IFS= read -r -d '' -N @READ@ b < "$f" 2>/dev/null
    [ "${#b}" -le @MAX@ ] || continue
    echo "@SECTION@gpu $j $n"; printf '|%s\n' "${b%%$'\n'*}"
  done
done
TAO_SLURM_GPU_READER
@LIST@TAO_SLURM_GPU
