# Reads the job list (fd 3, up to its end line), then squeue's output (stdin). Passes squeue's lines
# of our jobs (by id, or by name for a job whose id is not known yet) and what is not a job's line
# (its errors) through `|`-prefixed: the user's other jobs cost no transfer and no parsing; and writes on stderr the control lines: `rc <squeue rc> <need> <sacct ids>`
# (the ids squeue no longer lists, and the finished ones it still does: sacct's exit code stands in
# where squeue's was not read), then each job whose status.json is worth reading: `<job id>\t<path>\t<last signature>`.
!listed { if ($0 == "@LIST_END@") { listed = 1; next }
  split($0, f, "\t")
  if (f[1] == "R") root[f[2]] = f[3]
  else { n++; sid[n] = f[2]; jid[n] = f[3]; rix[n] = f[4]; sig[n] = f[5]; if (f[2] != "-") mine[f[2]] = 1; else byname[f[6]] = 1 }
  next }
/^@SECTION@rc / { rc = substr($0, @RC_AT@); next }
$1 !~ /^[0-9]/ || ($1 in mine) || ($NF in byname) { print "|" $0; if (NF > 1) state[$1] = $2 }
END {
  if (rc == "") rc = 1
  printf "@SECTION@rc squeue %s\n", rc
  for (i = 1; i <= n; i++) {
    s = sid[i]; want = 1
    if (s in state) { want = (state[s] !~ /^(@NOT_RUN@)$/); if (state[s] ~ /^(@FINISHED@)$/ && rc == "0") missing = missing (missing == "" ? "" : ",") s }
    else if (s != "-" && rc == "0") missing = missing (missing == "" ? "" : ",") s
    if (want) out[++need] = jid[i] "\t" root[rix[i]] "/" jid[i] "/status.json\t" sig[i]
  }
  print "rc " rc " " need + 0 " " missing > "/dev/stderr"
  for (i = 1; i <= need; i++) print out[i] > "/dev/stderr"
}
