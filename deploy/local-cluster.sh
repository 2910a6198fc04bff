#!/usr/bin/env bash
# Local Dask cluster for streamrff: one `dask scheduler` and N `dask worker` processes on
# 127.0.0.1, started with the same Python environment that has streamrff installed (the
# recipe the test suite and CI use; see streamrff/testing.py, LocalProcessCluster).
#
# Usage:
#   deploy/local-cluster.sh [--workers N] [--threads T] [--memory-limit SIZE] [--no-nanny]
#
# It prints the scheduler address (one line, tcp://127.0.0.1:PORT) on stdout, logs to
# stderr, and runs until Ctrl-C or SIGTERM, then stops every process it started. Point
# streamrff at it with `streamrff ... --scheduler tcp://127.0.0.1:PORT` or
# `distributed.Client("tcp://127.0.0.1:PORT")`. For example:
#
#   deploy/local-cluster.sh --workers 4 > scheduler-address &
#   ...
#   kill %1
#
# Environment: PYTHON selects the interpreter (default: python3 on PATH, e.g. an activated
# virtual environment). Client, scheduler and workers must run the same package versions.
set -euo pipefail

usage() {
    sed -n '/^# Usage:/,/^# Environment:/p' "$0" | sed -e 's/^# \{0,1\}//' -e '$d'
}

workers=2
threads=1
memory_limit=2GiB
nanny=()
while (($#)); do
    case "$1" in
        --workers) workers="${2:?--workers needs a number}"; shift 2 ;;
        --workers=*) workers="${1#*=}"; shift ;;
        --threads) threads="${2:?--threads needs a number}"; shift 2 ;;
        --threads=*) threads="${1#*=}"; shift ;;
        --memory-limit) memory_limit="${2:?--memory-limit needs a size}"; shift 2 ;;
        --memory-limit=*) memory_limit="${1#*=}"; shift ;;
        --no-nanny) nanny=(--no-nanny); shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "local-cluster.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
for value in "$workers" "$threads"; do
    if ! [[ "$value" =~ ^[1-9][0-9]*$ ]]; then
        echo "local-cluster.sh: --workers and --threads take a positive integer (got '$value')" >&2
        exit 2
    fi
done

# Run from a source checkout too: the repository root goes first on the import path.
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${repo_root}${PYTHONPATH:+:${PYTHONPATH}}"

# exec: SIGTERM/SIGINT sent to this script's pid reach Python, which stops the cluster.
exec "${PYTHON:-python3}" -m streamrff.testing cluster \
    --workers "$workers" --threads "$threads" --memory-limit "$memory_limit" "${nanny[@]}"
