/*
 * cpu_isa.h — CPU feature checks that compile with gcc and clang alike. __builtin_cpu_supports
 * covers avx2, fma and avx512*, but clang 14 (Debian 12's, which builds the libFuzzer targets of
 * make fuzz) rejects "f16c" as an unknown feature, so F16C is read from CPUID leaf 1 (ECX bit 29)
 * here. x86 only; callers keep their own #if around it.
 */
#ifndef ZINC_BASE_CPU_ISA_H
#define ZINC_BASE_CPU_ISA_H

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* 1 when the CPU has the F16C conversions (VCVTPH2PS/VCVTPS2PH), else 0. */
static inline int zisa_has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

#endif
