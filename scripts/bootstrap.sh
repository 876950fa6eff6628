#!/usr/bin/env bash
# Installs every Debian package dsvisor builds and tests with, then builds the one
# library Debian 12 has too old (scripts/build-libmicrohttpd.sh: libmicrohttpd 1.0.1 from
# Debian's source, into the user's cache). Idempotent: packages already present are
# skipped, apt-get update runs only when something is missing, and a library already
# built is kept.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

BUILD_PKGS=(build-essential cmake pkg-config
  libnng-dev libcjson-dev libnuma-dev libhwloc-dev libcgroup-dev libsystemd-dev
  libpcre2-dev libutf8proc-dev libcurl4-openssl-dev
  libgnutls28-dev  # HTTPS in the libmicrohttpd build-libmicrohttpd.sh makes
  curl)  # curl: scripts/demo.sh sends the first chat request with it, and fetches libmicrohttpd's source
TEST_PKGS=(clang hwloc python3 sentencepiece curl prometheus nodejs  # prometheus: promtool + server
  wamerican  # test-default-chat-replies: the English word list replies are checked against
  haproxy python3-yaml  # deploy/ tests: haproxy.cfg, the k8s manifest
  python3-jinja2  # test-gateway-tools: prompts checked against Jinja2's rendering
  python3-jsonschema  # test-structured-output: judges the structured replies
  gdb  # test-supervisor-signals: a debugger attaching to the supervisor
  systemd  # test-supervisor-unit: systemd-analyze verify of deploy/'s units
  openssl  # test-start-serving: a self-signed certificate for the HTTPS gateway
  chromium)  # test-status-page: the gateway's status page in a real (headless) browser
# Optional, only to re-train the bundled default model (tools/train_default_model.py);
# never needed to build, test or serve.
TRAIN_PKGS=(python3-torch python3-numpy libopenblas0-pthread sentencepiece python3-sentencepiece
  bible-kjv bible-kjv-text)

want=("${BUILD_PKGS[@]}")
if [ "${1:-}" = "--with-tests" ]; then
  want+=("${TEST_PKGS[@]}")
  # The gateway tests install the openai npm client. NodeSource's nodejs ships npm and
  # conflicts with Debian's npm package, so ask for it only when npm is missing.
  command -v npm >/dev/null || want+=(npm)
fi
case " $* " in *" --with-training "*) want+=("${TRAIN_PKGS[@]}") ;; esac

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "bootstrap: all ${#want[@]} packages present"
else
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "bootstrap: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# As the calling user, not root: the library goes to this user's cache.
"$here/build-libmicrohttpd.sh"
