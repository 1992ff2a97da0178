#!/bin/sh
# test_manpage.sh (issue 4): man/kvchat.1 formats without warnings and
# documents every option kvchat --help (and each subcommand's --help) shows,
# and --help shows every option the man page documents.
. "$top_srcdir/tests/e2e/lib.sh"
MAN="$top_srcdir/man/kvchat.1"

# groff: -ww turns on every warning; there must be none.
if command -v groff >/dev/null 2>&1; then
	groff -mdoc -Tutf8 -ww "$MAN" >"$TMPD/man.txt" 2>"$TMPD/groff.err"
	check "groff runs" [ -s "$TMPD/man.txt" ]
	if [ -s "$TMPD/groff.err" ]; then
		fail "groff warnings:"; cat "$TMPD/groff.err" >&2
	else
		ok
	fi
else
	echo "groff not installed: formatting not checked"
fi
if command -v mandoc >/dev/null 2>&1; then
	# STYLE-level messages are taste; WARNING and above are errors in the page.
	mandoc -T lint -W warning "$MAN" >"$TMPD/lint.txt" 2>&1
	if [ -s "$TMPD/lint.txt" ]; then fail "mandoc -T lint:"; cat "$TMPD/lint.txt" >&2; else ok; fi
fi

# Issue 26 (newcomer 5): the stats line's reasons render as three quoted
# items (an enclosure once ran to the end of the line), and the page names
# the architectures beyond Llama and Qwen.
if command -v groff >/dev/null 2>&1; then
	groff -mdoc -Tascii "$MAN" 2>/dev/null | sed 's/.\x08//g' | tr -s ' \n' '  ' >"$TMPD/man.asc"
	check "the reasons are quoted apart" \
	    grep -qF "('stopped: max tokens', 'context full' or 'interrupted')" "$TMPD/man.asc"
fi
for a in Gemma Phi-3 GLM-4 GPT-2; do
	check "the page names $a" grep -q "$a" "$MAN"
done

# Sections the page must have.
for s in NAME SYNOPSIS DESCRIPTION COMMANDS OPTIONS "NON-INTERACTIVE USE" ENVIRONMENT \
    FILES "EXIT STATUS" EXAMPLES "SEE ALSO"; do
	check "section $s" grep -q "^\.Sh $s\$" "$MAN"
done

# Long options in the page: ".Fl -name" (also inside .Op / .It lines).
grep -o 'Fl -[a-z][a-z0-9-]*' "$MAN" | sed 's/^Fl /-/' | sort -u >"$TMPD/man_opts"
check "man page lists options" [ -s "$TMPD/man_opts" ]

"$KVCHAT" --help >"$TMPD/help.txt" 2>&1
check "kvchat --help exits 0" [ $? -eq 0 ]
# Subcommands named in --help ("kvchat NAME ..." lines) and their own --help.
subs=$(sed -n 's/^ *\(usage:\)\{0,1\} *kvchat \([a-z][a-z0-9-]*\).*/\2/p' "$TMPD/help.txt" | sort -u)
check "--help names the subcommands" [ -n "$subs" ]
: >"$TMPD/allhelp.txt"
cat "$TMPD/help.txt" >>"$TMPD/allhelp.txt"
for c in $subs; do
	check "subcommand $c in the man page" grep -q "^\.Cm $c\$\|^\.It Cm $c\( \|\$\)" "$MAN"
	"$KVCHAT" "$c" --help >>"$TMPD/allhelp.txt" 2>&1 || true
done
grep -o -- '--[a-z][a-z0-9-]*' "$TMPD/allhelp.txt" | sort -u >"$TMPD/help_opts"
check "--help lists options" [ -s "$TMPD/help_opts" ]

missing=$(comm -23 "$TMPD/help_opts" "$TMPD/man_opts")
if [ -n "$missing" ]; then fail "in --help but not in kvchat.1:" $missing; else ok; fi
extra=$(comm -13 "$TMPD/help_opts" "$TMPD/man_opts")
if [ -n "$extra" ]; then fail "in kvchat.1 but in no --help:" $extra; else ok; fi

# kvchat serve --help lists every option its parser takes (issue 24), the
# short forms too (-h and --help aside).
"$KVCHAT" serve --help >"$TMPD/serve_help.txt" 2>&1
for o in $(grep -o 'strcmp(a, "-[-a-zA-Z]*")' "$top_srcdir/src/cli/sub/sub_serve.c" |
    sed 's/strcmp(a, "\(.*\)")/\1/' | sort -u); do
	case $o in -h|--help) continue ;; esac
	check "kvchat serve --help lists $o" grep -Eq -- "(^|[ ,(])$o([ ,)]|\$)" "$TMPD/serve_help.txt"
done

# Every short option of the chat's --help is documented too.
for o in $(grep -o -- ' -[a-zA-Z]\b' "$TMPD/help.txt" | sort -u); do
	check "short option $o in kvchat.1" grep -q "Fl ${o#-}\( \|\$\)" "$MAN"
done

# REPL commands of the issue, each an .It Ic entry.
for c in help new list resume rename delete system set show undo retry clear export quit stats; do
	check "chat command /$c documented" grep -q "^\.It Ic /$c\( \|\$\)" "$MAN"
done
# Environment variables kvchat reads (discovery, paths, colour).
# The README's chat section names every command --help lists, and the
# options and keys people look for first (issue 13: the README matches the program).
README="$top_srcdir/README.md"
for c in $(sed -n '/^Commands in the chat:/,/^\$/s/^  \(\/[a-z]*\).*/\1/p' "$TMPD/help.txt"); do
	check "README mentions $c" grep -qF -- "\`$c" "$README"
done
tr '\n' ' ' <"$README" >"$TMPD/readme1"	# one line: phrases may wrap
for w in "--recap N" "/history [N]" "kvchat --resume" "Ctrl-C while a reply" \
    "while a conversation's cache is rebuilt" "exit status 130"; do
	check "README mentions '$w'" grep -qF -- "$w" "$TMPD/readme1"
done
for v in KVCHAT_MODEL XDG_DATA_HOME XDG_STATE_HOME OLLAMA_MODELS HF_HUB_CACHE HF_HOME NO_COLOR; do
	check "environment $v documented" grep -q "Ev $v" "$MAN"
done
# ... and every variable the sources read.
for v in $(find "$top_srcdir/src" "$top_srcdir/sessions" -name "*.c" -exec cat {} + | grep -o 'getenv("[A-Za-z_0-9]*")' |
    sed 's/getenv("\(.*\)")/\1/' | sort -u); do
	check "environment $v (read by the sources) documented" grep -q "Ev $v" "$MAN"
done
done_testing
