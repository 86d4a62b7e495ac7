/* Internals shared by the files of the ops module (registry, plugins, conformance). */
#ifndef TITAN_OPS_INTERNAL_H
#define TITAN_OPS_INTERNAL_H

#include "ops/ops.h"

/* The op kind named s ("rope"), or -1. */
int ops_kind_from_name(const char *s);
/* "embedding, rmsnorm, ...": the op names in list order (plugin_only: those a plugin may
 * provide), cut to size. */
void ops_kind_names(char *buf, size_t size, int plugin_only);
/* 0 when a kernel plugin may not provide op k, else the kernel ABI version that allowed it
 * (oplist.h's plugin flag). */
int ops_kind_plugin(ops_kind k);
/* An implementation that is bound per unit rather than called through its fwd/bwd (a kernel
 * plugin's: a per-layer trampoline and saved state; ops/plugin.c provides them). The registry
 * keeps one with the implementation and calls it while resolving and releasing tables, so
 * the registry needs nothing from plugin.c and plugin.c calls only into the registry. */
typedef struct ops_binding {
    const char *origin; /* where the implementation came from (a plugin path), for messages */
    /* the constraint check, in place of ops_impl.check */
    int (*check)(const struct ops_binding *b, const ops_ctx *ctx, base_err *err);
    /* puts the unit's entry points of op k into t and records it in t->plugin_slot[k] */
    int (*bind)(const struct ops_binding *b, ops_table *t, ops_kind k, const char *path,
                base_err *err);
    /* releases what bind took for op k of t (nothing when t->plugin_slot[k] is 0) */
    void (*unbind)(ops_table *t, ops_kind k);
} ops_binding;
/* Registers an implementation with its binding (b may be NULL), without the
 * built-ins-first step (the plugin loader has done it). */
int ops_register_bound(const ops_impl *impl, const ops_binding *b, base_err *err);
/* Number of registered implementations, and dropping the ones registered after a mark (a
 * plugin whose init failed). */
int ops_registry_mark(void);
void ops_registry_rollback(int mark);
/* The op's first-registered (default) implementation. */
const ops_impl *ops_default_impl(ops_kind op);

#endif
