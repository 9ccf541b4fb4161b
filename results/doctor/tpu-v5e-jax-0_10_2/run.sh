# The doctor on the TPU: a subset of its corpus in one process, then the capstone's naive
# loop plain and under `python -m jitlab.doctor` (each process opens the chip once).
set -u
PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl-tpu/*.whl || exit 1
PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --only-binary=:all: --index-url file:///opt/pypi/simple --target /tmp/site2 pyyaml >/dev/null 2>&1
export PYTHONPATH=$PYTHONPATH:$PWD:/tmp/site:/tmp/site2 PYTHONUNBUFFERED=1
python3 -c 'import jax; print(jax.__version__, jax.devices())' > $OUT/env.txt 2>&1
C=tests/doctor/corpus
for run in 1; do
  s=$EPOCHREALTIME; python3 $C/capstone_naive.py > $OUT/naive_plain.txt 2>&1; e=$EPOCHREALTIME
  awk -v a=$s -v b=$e "BEGIN{print \"plain \", b-a}" >> $OUT/times.txt
  s=$EPOCHREALTIME; python3 -m jitlab.doctor --json $OUT/naive_doctor.json -- python3 $C/capstone_naive.py > $OUT/naive_doctor.txt 2>&1; e=$EPOCHREALTIME
  awk -v a=$s -v b=$e "BEGIN{print \"doctor \", b-a}" >> $OUT/times.txt
done
timeout 80 python3 tests/doctor/run_corpus.py $OUT/corpus.json $C/shape_2_last_batch.py $C/dtype_6_typed_key_then_raw_key.py $C/weak_2_int_then_float.py $C/function_9_jit_partial_per_step.py $C/static_11_remat_policy_per_step.py $C/shape_7_jit_of_exported_call.py $C/shape_8_closure_over_weights.py $C/helpers_2_padding_loop.py $C/clean_2_steady_loop.py $C/clean_6_int_then_array.py $C/persistent_1_below_minimum_time.py > $OUT/corpus.log 2>&1
echo "corpus rc=$?" >> $OUT/times.txt
cat $OUT/times.txt; tail -5 $OUT/corpus.log
