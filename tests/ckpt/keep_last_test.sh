#!/bin/sh
# keep_last_test.sh ZINC — checkpoint retention (zinc.ckpt_keep_last, `zinc train --keep-last N`):
#   a run saves every step with --keep-last 2 after an earlier run of the same config saved 3
#   tags without it: the newest 2 stay and the older default-named tags of that config go; what
#   stays: a tag of another config (other lr), a hand-named tag of the same config ("best"), a
#   tag of a higher step (a run resumed from an earlier tag left it), a user's directory, and a
#   tag holding a user's file — whole, manifest and shard files included, with a warning (the
#   first version deleted the checkpoint's files and kept only the user's); the resume from
#   what is left works and `zinc ckpt verify` passes; a resumed run that turns retention on does
#   not warn that the checkpoint had another config. Bad values (0, a word, without --save-dir,
#   the config key at -1) exit 2 naming the option or key. A tag whose removal a crash stopped
#   (.<tag>.pruning) is swept by the next save.
# usage: keep_last_test.sh ZINC
zinc=$1 cmd=train name=ckpt_keep_last
. "$(dirname "$0")/../cli_lib.sh"
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
# that COND MESSAGE: one check (counted with cli_lib's): COND, a shell condition, holds
that() {
    checks=$((checks + 1))
    eval "$1" || { echo "FAIL: $2"; fails=$((fails + 1)); }
}
run() { "$zinc" train --ranks 2 --threads 1 "$@"; }

run --steps 3 --save-every 1 --save-dir ck >first.log 2>&1
rc=$?
that '[ $rc = 0 ]' "first run: exit $rc: $(tail -3 first.log)"
run --steps 1 --lr 0.5 --save-dir other >other.log 2>&1
that 'mv other/step000001 ck/lr05' "no tag from the other config: $(tail -3 other.log)"
run --steps 9 --save-every 9 --save-dir future >future.log 2>&1
that 'mv future/step000009 ck/step000009' "no step-9 tag: $(tail -3 future.log)"
cp -r ck/step000001 ck/best
mkdir ck/notes && echo mine >ck/notes/readme.txt
echo mine >ck/step000002/notes.txt

run --steps 6 --save-every 1 --keep-last 2 --save-dir ck --resume ck/step000003 >kept.log 2>&1
rc=$?
that '[ $rc = 0 ]' "retention run: exit $rc: $(tail -3 kept.log)"
for t in step000005 step000006 step000009 lr05 best notes; do
    that '[ -d "ck/$t" ]' "ck/$t was removed"
done
for t in step000001 step000003 step000004; do
    that '[ ! -e "ck/$t" ]' "ck/$t (an older tag of the run) is still there"
done
that '[ "$(cat ck/step000002/notes.txt 2>/dev/null)" = mine ]' "the user's file in step000002 is gone"
that '"$zinc" ckpt verify ck/step000002 >kept2.log 2>&1' \
    "the tag holding a user's file is not whole: $(ls ck/step000002 | tr '\n' ' ')"
that '"$zinc" ckpt verify ck/best >best.log 2>&1' "the hand-named tag is not whole"
that 'grep -q "kept the older tag ck/step000002 whole: it holds notes.txt" kept.log' \
    "no warning for the tag holding a user's file: $(grep -i step000002 kept.log)"
that 'grep -q "removed the older tag ck/step000004 (zinc.ckpt_keep_last 2)" kept.log' \
    "the removals are not logged: $(grep -i removed kept.log | head -3)"
that '! grep -q "saved with another config" kept.log' "turning retention on warned of another config"
that '[ "$(cat ck/latest)" = step000006 ]' "latest is '$(cat ck/latest)', want step000006"
that '"$zinc" ckpt verify ck/step000006 >verify.log 2>&1' "ckpt verify of the newest tag fails"
# a tag whose removal a crash stopped (renamed to .<tag>.pruning, manifest gone): the next save
# sweeps it, and no load ever warns about it
cp -r ck/step000005 ck/.step000004.pruning && rm ck/.step000004.pruning/manifest.json
run --steps 7 --save-dir ck --resume ck/step000006 >resume.log 2>&1
that 'grep -q "resumed from ck/step000006 at step 6" resume.log' "resume: $(tail -3 resume.log)"
that '! grep -qi "damaged" resume.log' "a load warned: $(grep -i damaged resume.log)"
that '[ ! -e ck/.step000004.pruning ]' "the save left ck/.step000004.pruning"

# refused: exit 2, the message naming the option or key
expect 2 "--keep-last: expected a whole number 1..1000000, got '0'" --ranks 1 --steps 1 \
    --save-dir z --keep-last 0
expect 2 "--keep-last: expected a whole number" --ranks 1 --steps 1 --save-dir z --keep-last two
expect 2 "--keep-last needs --save-dir" --ranks 1 --steps 1 --keep-last 2
printf '{"train_micro_batch_size_per_gpu": 4, "zinc": {"ckpt_keep_last": -1}}\n' >neg.json
expect 2 "zinc.ckpt_keep_last" --ranks 1 --steps 1 --config neg.json --save-dir z
that '[ ! -e z ]' "a refused run made its --save-dir"
cli_finish
