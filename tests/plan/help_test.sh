#!/bin/sh
# help_test.sh ZINC — --help (or -h) anywhere on a command line prints that command's help on
# stdout, its own usage line first, and exits 0, before any other option is checked:
# `zinc train --steps 0 --help` was refused for its --steps, and `zinc bench memory --help` and
# `zinc bench comm --help` began with "usage: zinc bench adam".
# usage: help_test.sh ZINC
zinc=$1
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1   # should a case run after all (the old code), it writes here
fails=0
checks=0
# helps USAGE ARGS...: `zinc ARGS` exits 0 with USAGE (a prefix) as its first line on stdout
helps() {
    want=$1; shift
    checks=$((checks + 1))
    "$zinc" "$@" >out.txt 2>err.txt
    rc=$?
    first=$(head -n 1 out.txt)
    case "$first" in
    "$want"*) [ "$rc" = 0 ] && return ;;
    esac
    echo "FAIL: zinc $*: exit $rc, first line '$first', want 0 and '$want...'; stderr: $(cat err.txt)"
    fails=$((fails + 1))
}
helps "usage: zinc train " train --steps 0 --help
helps "usage: zinc train " train --bogus -h
helps "usage: zinc train " train --ranks 0 --model x --help
helps "usage: zinc plan " plan --gpus 0 --help
helps "usage: zinc plan " plan --bogus --help
helps "usage: zinc estimate " estimate --params 0 --help
helps "usage: zinc estimate " estimate --stage 9 -h
helps "usage: zinc plot " plot --bogus --help
helps "usage: zinc plot " plot a.jsonl b.jsonl --help
helps "usage: zinc config " config check --world-size 0 --help
helps "usage: zinc config " config check a.json b.json -h
helps "usage: zinc ckpt verify " ckpt verify --bogus --help
helps "usage: zinc ckpt inspect " ckpt inspect a b --help
helps "usage: zinc ckpt export " ckpt export --dtype fp8 --help
helps "usage: zinc ckpt bench " ckpt bench --mib 0 --help
helps "usage: zinc bench adam " bench adam --repeat 0 --help
helps "usage: zinc bench adam " bench adam --help
helps "usage: zinc bench memory " bench memory --help
helps "usage: zinc bench memory " bench memory --worlds 0 --help
helps "usage: zinc bench comm " bench comm --help
helps "usage: zinc bench comm " bench comm --accum 0 -h
helps "usage: zinc bench offload " bench offload --stage 0 --help
echo "cli_help: $checks checks, $((checks - fails)) passed, $fails failed"
[ "$fails" = 0 ]
