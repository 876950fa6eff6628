/* cpu_choice.c — the operator's --cpus and --housekeeping-cpus applied to the CPUs
 * dsvisor was given: parsing kernel cpulists, checking the lists against the given set
 * and each other, and restricting the topology to the instances' CPUs. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "dsv_policy.h"

#define MAX_OS_CPU (1 << 16) /* as dsv_topology_check(): room beyond Linux's NR_CPUS */

struct cpu_bits {
        uint64_t w[MAX_OS_CPU / 64];
};

static bool bit_get(const struct cpu_bits *b, int cpu) {
        return b->w[cpu / 64] >> (cpu % 64) & 1;
}

static void bit_set(struct cpu_bits *b, int cpu) {
        b->w[cpu / 64] |= 1ull << (cpu % 64);
}

/* One decimal CPU number at *p; advances *p. */
static int parse_number(const char **p, int *ret) {
        const char *s = *p;
        if (*s < '0' || *s > '9')
                return -EINVAL;
        long v = 0;
        while (*s >= '0' && *s <= '9') {
                v = v * 10 + (*s++ - '0');
                if (v >= MAX_OS_CPU)
                        return -EINVAL;
        }
        *p = s;
        *ret = (int)v;
        return 0;
}

static int parse_bits(const char *s, struct cpu_bits *ret) {
        memset(ret, 0, sizeof *ret);
        while (*s) {
                int lo, hi, r;
                if ((r = parse_number(&s, &lo)) < 0)
                        return r;
                hi = lo;
                if (*s == '-') {
                        s++;
                        if ((r = parse_number(&s, &hi)) < 0 || hi < lo)
                                return -EINVAL;
                }
                for (int c = lo; c <= hi; c++)
                        bit_set(ret, c);
                if (*s == ',' && s[1])
                        s++;
                else if (*s)
                        return -EINVAL;
        }
        return 0;
}

int dsv_policy_cpulist_parse(const char *s, int *cpus, size_t cap) {
        if (!s || (!cpus && cap > 0))
                return -EINVAL;
        struct cpu_bits bits;
        int r = parse_bits(s, &bits);
        if (r < 0)
                return r;
        size_t n = 0;
        for (int c = 0; c < MAX_OS_CPU; c++)
                if (bit_get(&bits, c)) {
                        if (n >= cap)
                                return -ENOBUFS;
                        cpus[n++] = c;
                }
        return (int)n;
}

/* The CPUs in bits and not in minus (may be NULL), as a cpulist into buf. */
static void format_bits(const struct cpu_bits *bits, const struct cpu_bits *minus, char *buf, size_t size) {
        int cpus[DSV_TOPOLOGY_MAX_PUS];
        size_t n = 0;
        for (int c = 0; c < MAX_OS_CPU && n < DSV_TOPOLOGY_MAX_PUS; c++)
                if (bit_get(bits, c) && !(minus && bit_get(minus, c)))
                        cpus[n++] = c;
        if (dsv_policy_cpulist_format(cpus, n, buf, size) < 0)
                snprintf(buf, size, "(too many to list)");
}

static bool any_bits(const struct cpu_bits *a, const struct cpu_bits *minus) {
        for (size_t i = 0; i < sizeof a->w / sizeof a->w[0]; i++)
                if (a->w[i] & ~(minus ? minus->w[i] : 0))
                        return true;
        return false;
}

/* Copies topo with only the PUs in keep: cores without a PU left are dropped, nodes stay
 * (a node without cores is then memory-only). */
static void restrict_topology(const struct dsv_topology *topo, const struct cpu_bits *keep, struct dsv_topology *ret) {
        memset(ret, 0, sizeof *ret);
        ret->n_nodes = topo->n_nodes;
        for (int n = 0; n < topo->n_nodes; n++) {
                const struct dsv_topology_node *node = &topo->nodes[n];
                ret->nodes[n] = *node;
                ret->nodes[n].core_first = ret->n_cores;
                ret->nodes[n].n_cores = 0;
                for (int c = node->core_first; c < node->core_first + node->n_cores; c++) {
                        const struct dsv_topology_core *core = &topo->cores[c];
                        struct dsv_topology_core *out = &ret->cores[ret->n_cores];
                        *out = *core;
                        out->pu_first = ret->n_pus;
                        out->n_pus = 0;
                        for (int u = core->pu_first; u < core->pu_first + core->n_pus; u++)
                                if (bit_get(keep, topo->pus[u])) {
                                        ret->pus[ret->n_pus++] = topo->pus[u];
                                        out->n_pus++;
                                }
                        if (out->n_pus > 0) {
                                ret->n_cores++;
                                ret->nodes[n].n_cores++;
                        }
                }
        }
}

/* Parses the list given as option `name` into bits, refusing CPUs outside given. */
static int parse_option(const char *name, const char *list, const struct cpu_bits *given, struct cpu_bits *bits,
                        char *why, size_t why_size) {
        char text[512];
        if (parse_bits(list, bits) < 0) {
                snprintf(why, why_size, "%s: '%s' is not a CPU list (e.g. 2-15,18)", name, list);
                return -EINVAL;
        }
        if (any_bits(bits, given)) {
                format_bits(bits, given, text, sizeof text);
                char given_text[512];
                format_bits(given, NULL, given_text, sizeof given_text);
                bool many = strpbrk(text, ",-") != NULL;
                snprintf(why, why_size, "%s: CPU%s %s %s not among the CPUs dsvisor was given (%s)", name,
                         many ? "s" : "", text, many ? "are" : "is", given_text);
                return -EINVAL;
        }
        return 0;
}

int dsv_policy_cpus_choose(const struct dsv_topology *given, const char *cpus, const char *housekeeping_cpus,
                           int n_instances, struct dsv_topology *ret, char *why, size_t why_size) {
        if (!given || !ret || !why || why_size == 0 || n_instances < 0)
                return -EINVAL;
        why[0] = '\0';
        int r = dsv_topology_check(given);
        if (r < 0) {
                snprintf(why, why_size, "the topology is inconsistent");
                return r;
        }
        bool have_cpus = cpus && *cpus, have_hk = housekeeping_cpus && *housekeeping_cpus;
        if (!have_cpus && !have_hk) {
                memcpy(ret, given, sizeof *ret);
                return 0;
        }
        struct cpu_bits given_bits, want, hk;
        memset(&given_bits, 0, sizeof given_bits);
        memset(&hk, 0, sizeof hk);
        for (int u = 0; u < given->n_pus; u++)
                bit_set(&given_bits, given->pus[u]);
        if (have_hk && (r = parse_option("--housekeeping-cpus", housekeeping_cpus, &given_bits, &hk, why, why_size)) < 0)
                return r;
        if (have_cpus) {
                if ((r = parse_option("--cpus", cpus, &given_bits, &want, why, why_size)) < 0)
                        return r;
                struct cpu_bits both;
                for (size_t i = 0; i < sizeof both.w / sizeof both.w[0]; i++)
                        both.w[i] = want.w[i] & hk.w[i];
                if (any_bits(&both, NULL)) {
                        char text[512];
                        format_bits(&both, NULL, text, sizeof text);
                        snprintf(why, why_size, "--cpus and --housekeeping-cpus both list CPUs %s", text);
                        return -EINVAL;
                }
        } else {
                for (size_t i = 0; i < sizeof want.w / sizeof want.w[0]; i++)
                        want.w[i] = given_bits.w[i] & ~hk.w[i];
        }

        struct dsv_topology chosen;
        restrict_topology(given, &want, &chosen);
        int needed = n_instances > 0 ? n_instances : 1;
        if (chosen.n_cores < needed) {
                char text[512];
                format_bits(&want, NULL, text, sizeof text);
                if (have_cpus)
                        snprintf(why, why_size, "--cpus %s: %d core%s for %d instance%s; each instance needs a core of its own",
                                 cpus, chosen.n_cores, chosen.n_cores == 1 ? "" : "s", needed, needed == 1 ? "" : "s");
                else
                        snprintf(why, why_size,
                                 "--housekeeping-cpus %s leaves %d core%s (CPUs %s) for %d instance%s; each instance "
                                 "needs a core of its own",
                                 housekeeping_cpus, chosen.n_cores, chosen.n_cores == 1 ? "" : "s",
                                 text[0] ? text : "none", needed, needed == 1 ? "" : "s");
                return -EINVAL;
        }
        memcpy(ret, &chosen, sizeof *ret);
        return 1;
}
