/*
 * test_args.c — the CLI's shared argument helpers (tools/args.c, compiled into this test):
 *   1. zarg_double and zarg_int64 read plain decimal and nothing else: strtod alone took "0x10"
 *      as 16, " 3" as 3 and "infinity" as a number;
 *   2. zarg_value refuses an option's value that is missing, empty or another option ("-o
 *      --log"), and takes single-dash values ("-1", "-").
 * The commands' use of them is tests/plan/values_test.sh.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "testutil.h"
#include "tools/commands.h"

static void test_double(void)
{
    static const struct {
        const char *s;
        double v;
    } good[] = {{"3", 3},        {"-2.5", -2.5}, {"+4", 4},         {"7e9", 7e9},
                {"1.5E-3", 1.5e-3}, {".5", 0.5},  {"5.", 5},         {"-0", 0},
                {"1e+2", 100},   {"0.000", 0},   {"123456789012", 123456789012.0},
                {"1e-400", 0},   {"-1e-400", 0}, {"4.9e-324", 4.9e-324}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        double v = -99;
        ZT_CHECK(zarg_double(good[i].s, &v) == 0 && v == good[i].v, "zarg_double('%s'): %g",
                 good[i].s, v);
    }
    static const char *const bad[] = {"",     " 3",   "3 ",   "\t3",  "3\n",  "0x10", "0X1p3",
                                      "inf",  "-inf", "infinity", "nan", "NAN", "1e",  "1e+",
                                      "e5",   ".",    "-",    "+",    "+-1",  "1..2", "1.2.3",
                                      "1e5.5", "1,5", "1e999", "-1e999", "٣", "3x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        double v = -99;
        ZT_CHECK(zarg_double(bad[i], &v) != 0 && v == -99, "zarg_double('%s') took %g", bad[i],
                 v);
    }
    double v = -99;
    ZT_CHECK(zarg_double(NULL, &v) != 0, "zarg_double(NULL)");
    /* -0 and an underflow to -0 are 0: one value, one config hash (--lr -0 hashed differently) */
    const char *zeros[] = {"-0", "-0.0", "-1e-400"};
    for (int i = 0; i < 3; i++)
        ZT_CHECK(zarg_double(zeros[i], &v) == 0 && v == 0 && !signbit(v), "zarg_double('%s'): "
                 "%g, sign %d", zeros[i], v, signbit(v) != 0);
}

static void test_int64(void)
{
    static const struct {
        const char *s;
        long long v;
    } good[] = {{"16", 16},           {"-3", -3},
                {"+5", 5},            {"7.5e9", 7500000000LL},
                {"1E3", 1000},        {"9007199254740993", 9007199254740993LL},
                {"-9223372036854775808", (-9223372036854775807LL - 1)}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        long long n = -99;
        ZT_CHECK(zarg_int64(good[i].s, &n) == 0 && n == good[i].v, "zarg_int64('%s'): %lld",
                 good[i].s, n);
    }
    static const char *const bad[] = {"0x10", " 3",  "3 ",   "1.5",  "inf", "nan", "",
                                      "-",    "1e",  "1e19", "9223372036854775808", "010x",
                                      " 1e3", "0b1", "1_000"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        long long n = -99;
        ZT_CHECK(zarg_int64(bad[i], &n) != 0 && n == -99, "zarg_int64('%s') took %lld", bad[i],
                 n);
    }
}

static void test_value(void)
{
    /* the refusals print their usage error to stderr: that is the point, not noise */
    ZT_CHECK(zarg_value("test", "-o", "out.svg") == 0, "a file name is a value");
    ZT_CHECK(zarg_value("test", "--lr", "-1") == 0, "a negative number is a value");
    ZT_CHECK(zarg_value("test", "-o", "-") == 0, "'-' is a value");
    ZT_CHECK(zarg_value("test", "-o", "-x") == 0, "one dash is a value");
    ZT_CHECK(zarg_value("test", "-o", NULL) == 2, "a missing value: exit 2");
    ZT_CHECK(zarg_value("test", "-o", "") == 2, "an empty value: exit 2");
    ZT_CHECK(zarg_value("test", "-o", "--log") == 2, "an option as the value: exit 2");
    ZT_CHECK(zarg_value("test", "-o", "--") == 2, "'--' as the value: exit 2");
}

int main(void)
{
    test_double();
    test_int64();
    test_value();
    return zt_finish("test_args");
}
