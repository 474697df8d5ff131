#!/bin/sh
# Ask whyjob before torchrun starts this node's workers, for launchers that run one torchrun per
# node and restart it (torchrun --max-restarts, an elastic job): an unsafe node (a maintenance
# window inside the next hour, a recent hardware-class GPU fault) exits 75 (EX_TEMPFAIL) instead
# of joining the rendezvous, so the job does not start a generation the cloud is about to kill.
#   NODE_NAME       this node (the downward API's spec.nodeName)
#   WHYJOB_SERVER   where `whyjob serve` answers; WHYJOB_TOKEN its bearer token
# Usage: preflight-torchrun.sh --nnodes=4 --nproc-per-node=8 ... train.py
whyjob preflight "${NODE_NAME:?set NODE_NAME}" --window "${WHYJOB_PREFLIGHT_WINDOW:-60m}"
code=$?
if [ "$code" -eq 1 ]; then
    echo "preflight: ${NODE_NAME} is unsafe to start on; not joining the rendezvous" >&2
    exit 75
fi
exec torchrun "$@"
