# Shell helpers for the tests that run `kvserve serve` processes (sourced).

# serve_scratch NAME: a scratch directory in $DIR and an empty $PIDS; on exit
# every process in $PIDS is killed and the directory removed.
serve_scratch() {
  DIR=$(mktemp -d "/tmp/kvserve-$1-XXXXXX")
  PIDS=()
  trap serve_cleanup EXIT
}

serve_cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$DIR"
}
