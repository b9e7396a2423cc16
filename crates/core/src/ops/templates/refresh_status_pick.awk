# Reads refresh_status_locate.sh's output and prints, for each job whose status.json is found and whose
# signature differs from the one last read, `job<TAB>path<TAB>signature`: the top file when it exists,
# else the most recently modified of TAO's places. The signature is `size:mtime`, and `:rel` (the
# directory under the results directory) for a file found below it, so a file that moved is read again.
$1 == "P" { job[$5] = $2; old[$2] = $3; rel[$5] = $4; next }
{ p = $2; if (!(p in job)) next; j = job[p]; s = $1; split(s, t, ":")
  if (rel[p] != "-") s = s ":" rel[p]
  if (rel[p] == "-") { top[j] = 1; best[j] = p; sig[j] = s }
  else if (!(j in top) && (!(j in best) || t[2] + 0 > when[j])) { best[j] = p; sig[j] = s; when[j] = t[2] + 0 } }
END { for (j in best) if (old[j] != sig[j]) print j "\t" best[j] "\t" sig[j] }
