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
zinc=$1
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
run() { "$zinc" train --ranks 2 --threads 1 "$@"; }

run --steps 3 --save-every 1 --save-dir ck >first.log 2>&1 || fail "first run: $(tail -3 first.log)"
run --steps 1 --lr 0.5 --save-dir other >other.log 2>&1 || fail "other run: $(tail -3 other.log)"
mv other/step000001 ck/lr05 || fail "no tag from the other config"
run --steps 9 --save-every 9 --save-dir future >future.log 2>&1 || fail "future run: $(tail -3 future.log)"
mv future/step000009 ck/step000009 || fail "no step-9 tag"
cp -r ck/step000001 ck/best
mkdir ck/notes && echo mine >ck/notes/readme.txt
echo mine >ck/step000002/notes.txt

run --steps 6 --save-every 1 --keep-last 2 --save-dir ck --resume ck/step000003 >kept.log 2>&1 ||
    fail "retention run: $(tail -3 kept.log)"
for t in step000005 step000006 step000009 lr05 best notes; do
    [ -d "ck/$t" ] || fail "ck/$t was removed"
done
for t in step000001 step000003 step000004; do
    [ ! -e "ck/$t" ] || fail "ck/$t (an older tag of the run) is still there"
done
[ "$(cat ck/step000002/notes.txt 2>/dev/null)" = mine ] || fail "the user's file in step000002 is gone"
"$zinc" ckpt verify ck/step000002 >kept2.log 2>&1 ||
    fail "the tag holding a user's file is not whole: $(ls ck/step000002 | tr '\n' ' ')"
"$zinc" ckpt verify ck/best >best.log 2>&1 || fail "the hand-named tag is not whole: $(tail -1 best.log)"
grep -q "kept the older tag ck/step000002 whole: it holds notes.txt" kept.log ||
    fail "no warning for the tag holding a user's file: $(grep -i step000002 kept.log)"
grep -q "removed the older tag ck/step000004 (zinc.ckpt_keep_last 2)" kept.log ||
    fail "the removals are not logged: $(grep -i removed kept.log | head -3)"
! grep -q "saved with another config" kept.log || fail "turning retention on warned of another config"
[ "$(cat ck/latest)" = step000006 ] || fail "latest is '$(cat ck/latest)', want step000006"
"$zinc" ckpt verify ck/step000006 >verify.log 2>&1 || fail "ckpt verify: $(tail -2 verify.log)"
# a tag whose removal a crash stopped (renamed to .<tag>.pruning, manifest gone): the next save
# sweeps it, and no load ever warns about it
cp -r ck/step000005 ck/.step000004.pruning && rm ck/.step000004.pruning/manifest.json
run --steps 7 --save-dir ck --resume ck/step000006 >resume.log 2>&1 || fail "resume: $(tail -3 resume.log)"
grep -q "resumed from ck/step000006 at step 6" resume.log || fail "resume: $(grep -i resum resume.log)"
! grep -qi "damaged" resume.log || fail "a load warned: $(grep -i damaged resume.log)"
[ ! -e ck/.step000004.pruning ] || fail "the save left ck/.step000004.pruning"

# refused(NAME, PATTERN, ARGS...): exit 2 and PATTERN on stderr
refused() {
    name=$1 says=$2; shift 2
    "$zinc" train --ranks 1 --steps 1 "$@" >"$name.log" 2>&1
    rc=$?
    [ "$rc" = 2 ] || fail "$name: exit $rc, want 2"
    grep -q -- "$says" "$name.log" || fail "$name: no '$says' in: $(tail -2 "$name.log")"
}
refused zero "--keep-last: expected a whole number 1..1000000, got '0'" --save-dir z --keep-last 0
refused word "--keep-last: expected a whole number" --save-dir z --keep-last two
refused nodir "--keep-last needs --save-dir" --keep-last 2
printf '{"train_micro_batch_size_per_gpu": 4, "zinc": {"ckpt_keep_last": -1}}\n' >neg.json
refused key "zinc.ckpt_keep_last" --config neg.json --save-dir z
[ ! -e z ] || fail "a refused run made its --save-dir"

[ "$fails" = 0 ] && echo PASS || { echo "$fails failed"; exit 1; }
