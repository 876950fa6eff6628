#!/usr/bin/env bash
# dsvisor-worker's command line: every option that takes a number or a name refuses a bad
# one naming that option (so the option table and its codes stay in step), the cross-option
# rules refuse with their reason, all with exit status 2 before anything is loaded; a
# command line that parses gets as far as the model or the socket, whose failures exit 1
# naming the path.
set -u
worker=${DSV_BUILD_DIR:?}/bin/dsvisor-worker
tmp=$(mktemp -d) # 0700, ours: a socket directory the worker accepts
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
check() { # name, condition...
  local name=$1; shift
  if "$@"; then pass=$((pass + 1)); echo "ok   $name"; else fail=$((fail + 1)); echo "FAIL $name"; fi
}
# refused NAME STATUS MESSAGE ARGS...: the worker exits with STATUS and says MESSAGE
refused() {
  local name=$1 want_status=$2 want=$3; shift 3
  "$worker" "$@" >"$tmp/o" 2>"$tmp/e" </dev/null
  local status=$?
  if [ "$status" -eq "$want_status" ] && grep -qF -- "$want" "$tmp/e"; then
    pass=$((pass + 1)); echo "ok   $name"
  else
    fail=$((fail + 1)); echo "FAIL $name: exit $status, stderr:"; head -n 3 "$tmp/e"
  fi
}
ok=(--model "$tmp/none.dse" --listen "ipc://$tmp/w.sock")

for opt in model-fd threads cpus n-ctx max-batch token-budget kv-mem-mib grace-ms max-queue speculative \
  spec-k-min spec-k-max spec-step-tokens fast-forward log-format kv-disk-gib; do
  refused "bad_value_names_--$opt" 2 "bad value 'x' for --$opt" "${ok[@]}" "--$opt" x
done
refused bad_value_names_--kv-disk 2 "bad value '' for --kv-disk" "${ok[@]}" --kv-disk ""
refused bad_value_names_--draft-model 2 "bad value '' for --draft-model" "${ok[@]}" --draft-model ""
refused threads_zero_refused 2 "bad value '0' for --threads" "${ok[@]}" --threads 0
refused spec_k_max_above_8_refused 2 "bad value '9' for --spec-k-max" "${ok[@]}" --spec-k-max 9
for list in 0-1, ,0 0,,1 1-0 0- 0,0 0-2,1; do
  refused "cpus_${list}_refused" 2 "bad value '$list' for --cpus" "${ok[@]}" --cpus "$list"
done
refused kv_dtype_names_the_types 2 "--kv-dtype: 'fp16' is not a KV cache type; use f32, bf16, fp8 or int8" \
  "${ok[@]}" --kv-dtype fp16
DSV_KV=fp16 refused dsv_kv_names_the_types 2 "DSV_KV: 'fp16' is not a KV cache type; use f32, bf16, fp8 or int8" \
  "${ok[@]}"
refused unknown_option 2 "unrecognized option '--frobnicate'" "${ok[@]}" --frobnicate
refused missing_argument 2 "option '--threads' requires an argument" "${ok[@]}" --threads
refused unexpected_argument 2 "unexpected argument 'extra'" "${ok[@]}" extra
refused no_model 2 "give exactly one of --model and --model-fd" --listen "ipc://$tmp/w.sock"
refused model_and_model_fd 2 "give exactly one of --model and --model-fd" "${ok[@]}" --model-fd 0
refused no_listen 2 "--listen is required" --model "$tmp/none.dse"
refused budget_below_batch 2 "--token-budget 4 is below --max-batch 8" "${ok[@]}" --token-budget 4
refused k_min_above_k_max 2 "--spec-k-min 3 is above --spec-k-max 2" "${ok[@]}" --spec-k-min 3 --spec-k-max 2
refused draft_model_with_ngram 2 "--draft-model goes with --speculative draft" \
  "${ok[@]}" --draft-model "$tmp/d.dse" --speculative ngram
refused draft_without_model 2 "--speculative draft needs --draft-model" "${ok[@]}" --speculative draft
refused kv_disk_without_size 2 "--kv-disk and --kv-disk-gib go together" "${ok[@]}" --kv-disk "$tmp"
refused kv_disk_instance_with_slash 2 "--instance 'a/b' names the --kv-disk file" \
  "${ok[@]}" --kv-disk "$tmp" --kv-disk-gib 1 --instance a/b
check usage_on_error grep -q '^usage: dsvisor-worker' "$tmp/e"

"$worker" --help >"$tmp/o" 2>"$tmp/e"
check help_exits_0 test $? -eq 0
check help_on_stdout grep -q -- '--kv-dtype T' "$tmp/o"

# Parsed: the failures after parsing are the model's and the socket's, exit 1.
refused missing_model_named 1 "Failed to open model '$tmp/none.dse'" "${ok[@]}" --kv-dtype int8 --threads 2
mkdir -m 0755 "$tmp/open"
refused shared_socket_dir_explained 1 "must be this user's, mode 0700" \
  --model "$tmp/none.dse" --listen "ipc://$tmp/open/w.sock"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
