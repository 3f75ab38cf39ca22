#!/usr/bin/env bash
# Container entrypoint: load the CANN environment, then run the job.
#   entrypoint.sh train --recipe R   ->  npu-rl train --recipe R
#   entrypoint.sh tensorboard ...    ->  tensorboard ... (any program on PATH)
# The CANN set_env.sh scripts only export variables, so they are sourced here at
# run time (sourcing them in a Dockerfile RUN line has no lasting effect).
# Device discovery and checks live in npu_rl.platform (`npu-rl doctor`).
set -eo pipefail

ascend_root="${ASCEND_INSTALL_ROOT:-/usr/local/Ascend}"

load_cann_env() {
  # A function without arguments: a sourced script would otherwise see the
  # job's arguments as its own options (nnal's set_env.sh parses "$@").
  local script
  # The vendor scripts are not written for `set -e`.
  set +e
  for script in ascend-toolkit/set_env.sh nnal/atb/set_env.sh nnal/asdsip/set_env.sh; do
    if [ -f "${ascend_root}/${script}" ]; then
      # shellcheck source=/dev/null
      . "${ascend_root}/${script}"
    fi
  done
  set -e
}
load_cann_env

if [ "$#" -eq 0 ] || ! type -P -- "$1" >/dev/null; then
  set -- npu-rl "$@"
fi
exec "$@"
