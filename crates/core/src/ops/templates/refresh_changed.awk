# First input: the candidate status.json files (`job\tpath\tsig`, after a header line). Second: `stat`'s
# `size:mtime path` of those that exist. Prints the ones whose signature differs from the last read.
NR == FNR { if (FNR > 1) { id[$2] = $1; old[$2] = $3 }; next }
{ sp = index($0, " "); p = substr($0, sp + 1); g = substr($0, 1, sp - 1)
  if ((p in id) && old[p] != g) print id[p] "\t" p "\t" g }
