# `titan plan` says whether the training data has a document for every data-parallel rank:
# one text file of 3 paragraphs feeds 3 ranks, not 4 (rank 3 would get nothing).
# usage: plan_data.sh TITAN
titan=$1
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
printf 'First Citizen:\nSpeak.\n\nAll:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved.\n' \
  > "$out/three.txt"
fail=0
plan() { "$titan" plan --training.dataset_path "$out/three.txt" --world "$@"; }
p3=$(plan 3) || { echo "FAIL titan plan --world 3"; exit 1; }
p4=$(plan 4) || { echo "FAIL titan plan --world 4"; exit 1; }
p6=$(plan 6 --parallelism.data_parallel_replicate_degree 2) || { echo "FAIL --world 6"; exit 1; }
ptp=$(plan 8 --parallelism.tensor_parallel_degree 4) || { echo "FAIL --world 8 tp 4"; exit 1; }
check() { if grep -q "$2" <<<"$3"; then echo "ok   $1"; else echo "FAIL $1: $(tail -1 <<<"$3")"; fail=1; fi; }
check "3 paragraphs, 3 ranks: fed" "has at least 3 documents: every data-parallel rank" "$p3"
check "3 paragraphs, 4 ranks: warned" "warning: .*three.txt has 3 documents for 4 data-parallel ranks.*rank 3 gets no data" "$p4"
check "HSDP 2 x 3: 6 data-parallel ranks, ranks 3..5 warned" "for 6 data-parallel ranks.*ranks 3\.\.5 get no data" "$p6"
check "tp ranks share data: 8 ranks, tp 4 = 2 data-parallel" "every data-parallel rank" "$ptp"
p5=$(plan 5)
check "3 paragraphs, 5 ranks: ranks 3..4" "ranks 3\.\.4 get no data" "$p5"
exit $fail
