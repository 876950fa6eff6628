#!/usr/bin/env bash
# The main job on what exists today. The engine, tokenizer, worker and supervisor
# issues grow this into `dsvisor start --instances 2` serving the bundled default model;
# until then it shows the CPU dispatch the engine will use.
set -euo pipefail
build=${1:-build}
"$build/bin/dsvisor" --version
"$build/bin/dsvisor" cpuinfo
