#!/usr/bin/env bash
# The command line's self-description: every subcommand the top-level usage lists answers
# --help (exit 0, its usage on stdout), both at dispatch (`titan CMD --help`) and inside its
# own option loop (`titan CMD --help --help`); `titan --version` prints the version, the git
# commit and the CPU kernels' ISA; the usage lists every registered flavor (each one
# inspects).
set -uo pipefail
titan=$1; out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fail=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; cat "$out/o" 2>/dev/null; fail=1; }

"$titan" --help > "$out/usage" 2>&1 || { echo "FAIL titan --help exits $?"; exit 1; }
# the commands section: "  NAME      summary" lines between "commands:" and the blank line
cmds=$(sed -n '/^commands:$/,/^$/p' "$out/usage" | awk 'NF > 1 { print $1 }')
n=$(echo "$cmds" | wc -w)
[ "$n" -ge 10 ] && ok "titan --help lists $n commands" || bad "titan --help lists $n commands"
for c in $cmds; do
  for args in "--help" "--help --help" "-h"; do
    # shellcheck disable=SC2086
    timeout 30 "$titan" "$c" $args > "$out/o" 2> "$out/e"; rc=$?
    [ $rc -eq 0 ] && grep -q "^usage: titan $c" "$out/o" && [ ! -s "$out/e" ] &&
      ok "titan $c $args" || { bad "titan $c $args (rc $rc)"; cat "$out/e"; }
  done
done

"$titan" --version > "$out/o" 2>&1; rc=$?
[ $rc -eq 0 ] && sed -n 1p "$out/o" | grep -qE '^titan [0-9]+\.[0-9]+\.[0-9]+ \(commit [^ )]+\)$' &&
  sed -n 2p "$out/o" | grep -qE '^CPU kernels ISA: [a-z0-9]' &&
  ok "titan --version: $(tr '\n' ';' < "$out/o")" || bad "titan --version (rc $rc)"

# the flavors: the lines after "--flavor NAME" up to "--set", comma-separated
# (matched in the shell: `echo "$multi_line" | grep -q` under pipefail fails when grep exits
# on the first line before bash's echo writes the second, SIGPIPE; CI saw it once)
flavors=$(sed -n '/^  --flavor NAME/,/^  --set/p' "$out/usage" | sed '1d;$d' | tr ',\n' '  ')
for f in debugmodel 0.6B 32B debugmodel_moe 30B-A3B 235B-A22B; do
  case " $flavors " in *" $f "*) ;; *) bad "titan --help does not list flavor $f" ;; esac
done
for f in $flavors; do
  "$titan" inspect --flavor "$f" > "$out/o" 2>&1 || bad "titan inspect --flavor $f (listed)"
done
[ $fail -eq 0 ] && ok "usage lists $(echo "$flavors" | wc -w) flavors, each inspects"

exit $fail
