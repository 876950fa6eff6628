/* The text grammars of engine/src/grammar: ECMA-262 regexes, GBNF and choice lists,
 * accept/reject per construct on whole outputs, and the errors naming what is refused. */
#include "t.h"

#include "dse.h"

enum text_kind { REGEX, GBNF };

/* 1 when the whole text is an output of the grammar, 0 when not, -errno when it does
 * not compile. */
static int judge(enum text_kind kind, const char *source, const char *text, size_t text_len) {
        struct dse_grammar *g;
        struct dse_grammar_matcher *m;
        struct dse_diag diag = {{0}};
        int r = kind == REGEX ? dse_grammar_compile_regex(source, strlen(source), &g, &diag)
                              : dse_grammar_compile_gbnf(source, strlen(source), &g, &diag);
        if (r < 0) {
                fprintf(stderr, "  compile: %s\n", diag.msg);
                return r;
        }
        r = dse_grammar_matcher_new(g, &m, &diag);
        if (r == 0) {
                r = dse_grammar_matcher_advance(m, text, text_len);
                r = r == 0 ? dse_grammar_matcher_is_accepting(m) : r == -EINVAL ? 0 : r;
                dse_grammar_matcher_free(m);
        }
        dse_grammar_free(g);
        return r;
}

#define RE_ACCEPTS(re, text) ASSERT_EQ(judge(REGEX, re, text, strlen(text)), 1)
#define RE_REJECTS(re, text) ASSERT_EQ(judge(REGEX, re, text, strlen(text)), 0)
#define GBNF_ACCEPTS(g, text) ASSERT_EQ(judge(GBNF, g, text, strlen(text)), 1)
#define GBNF_REJECTS(g, text) ASSERT_EQ(judge(GBNF, g, text, strlen(text)), 0)

#define REFUSES(kind, source, err, what)                                                                    \
        do {                                                                                                \
                struct dse_grammar *g_ = NULL;                                                              \
                struct dse_diag d_ = {{0}};                                                                 \
                const char *s_ = (source);                                                                  \
                ASSERT_ERR(kind == REGEX ? dse_grammar_compile_regex(s_, strlen(s_), &g_, &d_)              \
                                         : dse_grammar_compile_gbnf(s_, strlen(s_), &g_, &d_),              \
                           err);                                                                            \
                if (!strstr(d_.msg, what))                                                                  \
                        T_FAIL("message \"%s\" does not name %s", d_.msg, what);                            \
        } while (0)

TEST(regex_literals_and_escapes) {
        RE_ACCEPTS("abc", "abc");
        RE_REJECTS("abc", "abcd"); /* the whole output must match */
        RE_REJECTS("abc", "ab");
        RE_ACCEPTS("a\\.b\\*\\(\\)\\/", "a.b*()/");
        RE_REJECTS("a\\.b", "axb");
        RE_ACCEPTS("\\t\\n\\x41\\u00e9\\u{1F600}\\cJ", "\t\nA\xc3\xa9\xf0\x9f\x98\x80\n");
        RE_ACCEPTS("\\ud83d\\ude00", "\xf0\x9f\x98\x80"); /* a surrogate pair is one code point */
        RE_ACCEPTS("\xc3\xa9t\xc3\xa9", "\xc3\xa9t\xc3\xa9");
        RE_ACCEPTS("a{", "a{"); /* not a quantifier: a literal brace (Annex B) */
        ASSERT_EQ(judge(REGEX, "\\0", "\0", 1), 1);
}

TEST(regex_classes) {
        RE_ACCEPTS("[a-c]x", "bx");
        RE_REJECTS("[a-c]x", "dx");
        RE_ACCEPTS("[^a-c]", "d");
        RE_ACCEPTS("[^a-c]", "\xe2\x82\xac"); /* a negated class matches whole code points */
        RE_REJECTS("[^a-c]", "a");
        RE_REJECTS("[^a-c]", "\xe2\x82"); /* never part of one */
        RE_ACCEPTS("\\d\\w\\s", "7_ ");
        RE_REJECTS("\\d", "\xd9\xa3"); /* ECMA's \d is ASCII */
        RE_ACCEPTS("\\s", "\xe3\x80\x80"); /* U+3000 is ECMA white space */
        RE_ACCEPTS("\\D\\W\\S", "a-x");
        RE_REJECTS("\\D", "5");
        RE_ACCEPTS("[\\d.-]+", "1.-2");
        RE_ACCEPTS("[\\w-z]", "-"); /* a class escape cannot bound a range: '-' is itself */
        RE_ACCEPTS("[\\b]", "\b");
        RE_ACCEPTS("[\xc3\xa0-\xc3\xbf]", "\xc3\xa9");
        RE_ACCEPTS("[\\u0100-\\u{10FFFF}]", "\xf4\x8f\xbf\xbf");
        RE_REJECTS("[\\u0100-\\u{10FFFF}]", "\xc3\xbf");
        RE_ACCEPTS(".", "\xe2\x82\xac");
        RE_REJECTS(".", "\n");
        RE_REJECTS(".", "\xe2\x80\xa8"); /* U+2028 is a line terminator */
        RE_ACCEPTS("[^]", "\n");
        RE_REJECTS("[]", "");
}

TEST(regex_groups_alternation_quantifiers) {
        RE_ACCEPTS("(ab|cd)+", "abcdab");
        RE_REJECTS("(ab|cd)+", "");
        RE_ACCEPTS("(?:ab)?c", "c");
        RE_ACCEPTS("(?<year>\\d{4})-(\\d\\d)", "2024-05");
        RE_ACCEPTS("a*", "");
        RE_ACCEPTS("a*?b", "aaab"); /* lazy: the same language */
        RE_ACCEPTS("x{3}", "xxx");
        RE_REJECTS("x{3}", "xx");
        RE_REJECTS("x{3}", "xxxx");
        RE_ACCEPTS("x{2,}", "xxxxx");
        RE_REJECTS("x{2,}", "x");
        RE_ACCEPTS("x{1,3}y", "xxxy");
        RE_REJECTS("x{1,3}y", "xxxxy");
        RE_ACCEPTS("a|b|", "");
        RE_ACCEPTS("(a|)(b|)", "b");
        RE_ACCEPTS("^(a|b)$", "b"); /* anchors at the ends change nothing */
        RE_ACCEPTS("^a$|^b$", "b");
        RE_ACCEPTS("(a?){2,3}", "aa");
}

/* Every way through a repeated group whose alternatives may match nothing meets again
 * after the group: following each way separately was exponential in the count (the
 * fuzz-grammar-regex finding regex-timeout.bin, a minute and more per input). */
TEST(regex_repeated_group_of_empty_alternatives) {
        RE_ACCEPTS("(||||a){24}b", "b");
        RE_ACCEPTS("(||||a){24}b", "aaab");
        RE_ACCEPTS("(||||a){24}b", "aaaaaaaaaaaaaaaaaaaaaaaab");
        RE_REJECTS("(||||a){24}b", "aaaaaaaaaaaaaaaaaaaaaaaaab");
        RE_REJECTS("(||||a){24}b", "aaa");
        RE_ACCEPTS("((|a)(|b)|){16}c", "ababbac");
        RE_REJECTS("((|a)(|b)|){16}c", "aaaaaaaaaaaaaaaaac"); /* 17 */
        const char finding[] = "^(?:[a-z]+|(|||-||]b*,){13}[_`|)|,4}b[^[\\s]a*).";
        RE_ACCEPTS(finding, "abc!");
        RE_ACCEPTS(finding, "-]bb,-_x");
        RE_ACCEPTS(finding, "-]bb,-4aa!"); /* a class up to the first ']': _`|)|,4}b[^[\s */
        RE_REJECTS(finding, "-]bb,-x");
        RE_REJECTS(finding, "");
}

/* Nested bounded repetitions of groups that can match nothing make one expansion
 * descend through a million rules and more: it overflowed the C stack while it recursed
 * (the fuzz-grammar-regex finding crash-34c0497e). Expected verdicts are Python's re
 * with counts 3 and 5, which agree for strings this short. */
TEST(regex_nested_repetitions_of_empty_groups_expand_deep) {
        RE_ACCEPTS("((|){1000}){1000}b", "b");
        RE_REJECTS("((|){1000}){1000}b", "bb");
        RE_ACCEPTS("(((|)|a){1000})b", "aab");
        RE_REJECTS("(((|)|a){1000})b", "aa");
        /* The finding itself: its first state would hold one parse per way into the
         * nesting, so the matcher refuses it, naming why, within the frame bound. */
        const char finding[] = "^(?:[a-z]+|(|||-|}]b+|(|||-||]bs]){3363}[_\\`|)s]){30363}[_\\`|)s]a*).";
        struct dse_grammar *g;
        struct dse_grammar_matcher *m = NULL;
        struct dse_diag diag = {{0}};
        ASSERT_OK(dse_grammar_compile_regex(finding, strlen(finding), &g, &diag));
        ASSERT_ERR(dse_grammar_matcher_new(g, &m, &diag), -E2BIG);
        ASSERT_TRUE(strstr(diag.msg, "grammar too ambiguous") != NULL);
        dse_grammar_free(g);
        const char frames[] = "((|){5000}){5000}b";
        ASSERT_OK(dse_grammar_compile_regex(frames, strlen(frames), &g, &diag));
        ASSERT_ERR(dse_grammar_matcher_new(g, &m, &diag), -E2BIG);
        ASSERT_TRUE(strstr(diag.msg, "stack frames") != NULL);
        dse_grammar_free(g);
}

/* A repeated group that may match nothing, around a '.', keeps one parse per count
 * still open, thousands of stacks a thousand frames deep; equal ones built along
 * different paths were compared and followed frame by frame, a second per byte (the
 * fuzz-grammar-regex finding timeout-33637bd4). Expected verdicts are Python's re with
 * counts 3 and 5. */
TEST(regex_repeated_optional_any_keeps_a_parse_per_count) {
        RE_ACCEPTS("(|.b*){5}c", "aaaaac");
        RE_REJECTS("(|.b*){5}c", "aaaaaac");
        RE_ACCEPTS("(|.b*){3}c", "abbbabc");
        RE_REJECTS("(|.b*){3}c", "ccccc");
        RE_ACCEPTS("(|.b*){2000}c", "c");
        RE_ACCEPTS("(|.b*){2000}c", "aaaaaaaaaaaaaaaaaaaac");
        RE_ACCEPTS("(|.b*){2000}c", "abbbabcbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbc");
        RE_REJECTS("(|.b*){2000}c", "ab\nc");
        RE_REJECTS("(|.b*){2000}c", "aaaaaaaaaaaaaaaaaaaa");
}

TEST(regex_refusals_name_the_construct) {
        REFUSES(REGEX, "(a)\\1", -EOPNOTSUPP, "backreference '\\1'");
        REFUSES(REGEX, "(?<x>a)\\k<x>", -EOPNOTSUPP, "backreference '\\k'");
        REFUSES(REGEX, "a(?=b)", -EOPNOTSUPP, "lookahead '(?='");
        REFUSES(REGEX, "a(?!b)", -EOPNOTSUPP, "lookahead '(?!'");
        REFUSES(REGEX, "(?<=a)b", -EOPNOTSUPP, "lookbehind '(?<='");
        REFUSES(REGEX, "(?<!a)b", -EOPNOTSUPP, "lookbehind '(?<!'");
        REFUSES(REGEX, "\\bword", -EOPNOTSUPP, "'\\b'");
        REFUSES(REGEX, "\\p{L}", -EOPNOTSUPP, "'\\p'");
        REFUSES(REGEX, "a^b", -EOPNOTSUPP, "'^'");
        REFUSES(REGEX, "a$b", -EOPNOTSUPP, "'$'");
        REFUSES(REGEX, "(a*)*", -EOPNOTSUPP, "empty string");
        REFUSES(REGEX, "(?i)abc", -EINVAL, "'(?i'");
        REFUSES(REGEX, "(?P<n>a)", -EINVAL, "'(?P'");
        REFUSES(REGEX, "(ab", -EINVAL, "unterminated group");
        REFUSES(REGEX, "ab)", -EINVAL, "unmatched ')'");
        REFUSES(REGEX, "[ab", -EINVAL, "unterminated character class");
        REFUSES(REGEX, "[z-a]", -EINVAL, "out of order");
        REFUSES(REGEX, "*a", -EINVAL, "nothing to repeat");
        REFUSES(REGEX, "a{3,2}", -EINVAL, "out of order");
        REFUSES(REGEX, "a{100000}", -E2BIG, "repetition count");
        REFUSES(REGEX, "\\q", -EINVAL, "unknown escape '\\q'");
        REFUSES(REGEX, "\\ud800", -EOPNOTSUPP, "lone surrogate");
        REFUSES(REGEX, "a\\", -EINVAL, "at the end");
        REFUSES(REGEX, "\xff", -EINVAL, "not UTF-8");
}

static const char arithmetic[] = "# integer arithmetic\n"
                                 "root ::= expr\n"
                                 "expr ::= term (\"+\" term)*\n"
                                 "term ::= num | \"(\" expr \")\"\n"
                                 "num  ::= [1-9] [0-9]{0,3} | \"0\"\n";

TEST(gbnf_rules_literals_groups) {
        GBNF_ACCEPTS(arithmetic, "1+(20+300)");
        GBNF_ACCEPTS(arithmetic, "0");
        GBNF_REJECTS(arithmetic, "01");
        GBNF_REJECTS(arithmetic, "12345");
        GBNF_REJECTS(arithmetic, "(1+2");
        GBNF_ACCEPTS("root ::= \"a\" |\n  \"b\"  # alternation continues after '|'\n", "b");
        GBNF_ACCEPTS("root ::= (\n  \"x\"\n  \"y\"\n)\n", "xy"); /* newlines inside parentheses */
        GBNF_ACCEPTS("root ::= \"\\x41\\u00e9\\U0001F600\\t\\\"\\\\\"", "A\xc3\xa9\xf0\x9f\x98\x80\t\"\\");
        GBNF_ACCEPTS("root ::= \"ab\"*", "abab"); /* a quantifier takes the whole literal */
        GBNF_REJECTS("root ::= \"ab\"*", "aba");
        GBNF_ACCEPTS("root ::= x\nx ::= \"x\"", "x"); /* a rule used before its definition */
        GBNF_ACCEPTS("root ::= \"\"", "");
}

TEST(gbnf_classes_and_quantifiers) {
        GBNF_ACCEPTS("root ::= [a-z_]+", "a_b");
        GBNF_REJECTS("root ::= [a-z_]+", "");
        GBNF_ACCEPTS("root ::= [^\"\\n]*", "x\xc3\xa9y");
        GBNF_REJECTS("root ::= [^\"\\n]*", "x\"");
        GBNF_ACCEPTS("root ::= [\\]\\[-]", "]");
        GBNF_ACCEPTS("root ::= [a-]", "-");
        GBNF_ACCEPTS("root ::= .", "\n"); /* `.` is any character in GBNF */
        GBNF_ACCEPTS("root ::= \"a\"?", "");
        GBNF_ACCEPTS("root ::= \"a\"{2}", "aa");
        GBNF_REJECTS("root ::= \"a\"{2}", "aaa");
        GBNF_ACCEPTS("root ::= \"a\"{ 1 , }", "aaaa");
        GBNF_ACCEPTS("root ::= \"a\"{0,2} \"b\"", "aab");
        GBNF_REJECTS("root ::= \"a\"{0,2} \"b\"", "aaab");
}

/* A repetition of a rule that repeats itself keeps a parse alive for every nesting
 * depth: after k bytes the state holds k stacks and each byte re-adds every depth from
 * every one of them. Deduplicating that by walking the state was O(k^5) in all (the
 * fuzz seed gbnf-nested-repetition-many-parses took seconds for 120 bytes, these 200
 * minutes); through the stacks' hashes it is fast, and judges the same. */
TEST(gbnf_nested_repetition_keeps_many_parses) {
        const char *nested = "root ::= [^(Tn]root*";
        char text[201];
        memset(text, 'x', 200);
        text[200] = 0;
        GBNF_ACCEPTS(nested, text);
        text[199] = 'T';
        GBNF_REJECTS(nested, text);
        struct dse_grammar *g;
        struct dse_grammar_matcher *m;
        struct dse_diag diag = {{0}};
        ASSERT_OK(dse_grammar_compile_gbnf(nested, strlen(nested), &g, &diag));
        ASSERT_OK(dse_grammar_matcher_new(g, &m, &diag));
        for (size_t i = 0; i < 199; i++) /* one byte at a time, as a sampler feeds it */
                ASSERT_OK(dse_grammar_matcher_advance(m, text + i, 1));
        ASSERT_EQ(dse_grammar_matcher_is_accepting(m), 1);
        ASSERT_ERR(dse_grammar_matcher_advance(m, "n", 1), -EINVAL);
        ASSERT_OK(dse_grammar_matcher_advance(m, "\xc3\xa9", 2));
        ASSERT_EQ(dse_grammar_matcher_is_accepting(m), 1);
        dse_grammar_matcher_free(m);
        dse_grammar_free(g);
}

TEST(gbnf_errors_name_what) {
        REFUSES(GBNF, "root ::= value\n", -EINVAL, "rule 'value' is used but never defined");
        REFUSES(GBNF, "start ::= \"x\"\n", -EINVAL, "no rule 'root'");
        REFUSES(GBNF, "root ::= \"x\"\nroot ::= \"y\"\n", -EINVAL, "defined twice");
        REFUSES(GBNF, "root = \"x\"\n", -EINVAL, "'::='");
        REFUSES(GBNF, "root ::= \"x\n", -EINVAL, "unterminated literal");
        REFUSES(GBNF, "root ::= [ab\n", -EINVAL, "line 1 column 10: unterminated character class");
        REFUSES(GBNF, "root ::= (\"x\"\n", -EINVAL, "unterminated group");
        REFUSES(GBNF, "root ::= \"a\" )\n", -EINVAL, "unexpected ')'");
        REFUSES(GBNF, "root ::= \"\\q\"\n", -EINVAL, "unknown escape");
        REFUSES(GBNF, "root ::= [z-a]\n", -EINVAL, "out of order");
        REFUSES(GBNF, "root ::= \"a\"{2,1}\n", -EINVAL, "out of order");
        REFUSES(GBNF, "root ::= <[1234]>\n", -EOPNOTSUPP, "token references");
        REFUSES(GBNF, "root ::= root \"a\" | \"b\"\n", -ELOOP, "left recursion");
        REFUSES(GBNF, "root ::= (\"a\"?)*\n", -ELOOP, "left recursion");
        REFUSES(GBNF, "\n\nroot ::= \"a\"\nx ::= ?\n", -EINVAL, "line 4");
}

TEST(choice_is_exactly_one_string) {
        const char *choices[] = {"red", "green", "gr"};
        struct dse_grammar *g;
        struct dse_grammar_matcher *m;
        struct dse_diag diag = {{0}};
        ASSERT_OK(dse_grammar_compile_choice(choices, 3, &g, &diag));
        const char *texts[] = {"red", "green", "gr", "gre", "re", "redd", ""};
        const int accepted[] = {1, 1, 1, 0, 0, 0, 0};
        for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
                ASSERT_OK(dse_grammar_matcher_new(g, &m, &diag));
                int r = dse_grammar_matcher_advance(m, texts[i], strlen(texts[i]));
                ASSERT_EQ(r == 0 && dse_grammar_matcher_is_accepting(m), accepted[i]);
                dse_grammar_matcher_free(m);
        }
        dse_grammar_free(g);
        ASSERT_ERR(dse_grammar_compile_choice(choices, 0, &g, &diag), -EINVAL);
        const char *with_null[] = {"a", NULL};
        ASSERT_ERR(dse_grammar_compile_choice(with_null, 2, &g, &diag), -EINVAL);
}
