# Sourced by the tests that drive the pinned npm clients of tests/integration/structured-clients
# (test-structured-output.sh, test-tool-syntax-e2e.sh; ctest runs them under one
# RESOURCE_LOCK): checks the tools, installs the clients into $BUILD/tests/structured-clients
# when the lock file changed or they are missing, and sets CLIENTS. Needs SRC and BUILD.
for tool in node npm python3; do
  command -v $tool >/dev/null || { echo "missing $tool (scripts/bootstrap.sh --with-tests)"; echo "0 passed, 1 failed"; exit 1; }
done
CLIENTS=$BUILD/tests/structured-clients
if ! cmp -s "$SRC/structured-clients/package-lock.json" "$CLIENTS/package-lock.json" 2>/dev/null ||
   [ ! -f "$CLIENTS/node_modules/ai/package.json" ]; then
  rm -rf "$CLIENTS" && mkdir -p "$CLIENTS"
  cp "$SRC/structured-clients/package.json" "$SRC/structured-clients/package-lock.json" "$CLIENTS/"
  if ! (cd "$CLIENTS" && timeout 300 npm ci --no-audit --no-fund --silent >npm.log 2>&1); then
    echo "npm ci failed:"; tail -20 "$CLIENTS/npm.log"; echo "0 passed, 1 failed"; exit 1
  fi
fi
