# Sourced by deploy/quickstart.sh and deploy/test.sh: `stage NAME` closes the
# stage before it and prints its wall time, so a run's log says where the
# minutes went (docs/first-run.md quotes these lines).
stage_started=${stage_started:-$SECONDS}
stage_name=${stage_name:-}
stage() {
  if [ -n "$stage_name" ]; then
    echo "== stage '$stage_name' took $((SECONDS - stage_started)) s (total $SECONDS s)" >&2
  fi
  stage_name=$1
  stage_started=$SECONDS
}
