/* Internals shared by the files of the ops module (registry, plugins, conformance). */
#ifndef TITAN_OPS_INTERNAL_H
#define TITAN_OPS_INTERNAL_H

#include "ops/ops.h"

/* The op kind named s ("rope"), or -1. */
int ops_kind_from_name(const char *s);
/* Registers without the built-ins-first step (the plugin loader has done it). */
int ops_register_nobuiltin(const ops_impl *impl, base_err *err);
/* Number of registered implementations, and dropping the ones registered after a mark (a
 * plugin whose init failed). */
int ops_registry_mark(void);
void ops_registry_rollback(int mark);
/* The op's first-registered (default) implementation. */
const ops_impl *ops_default_impl(ops_kind op);

/* Plugin implementations (plugin.c): whether the op kind can come from a plugin, the
 * plugin's constraint check, and binding a plugin implementation of op k into table t for
 * the unit at path (a per-layer trampoline and saved-state slot). */
int ops_plugin_op_supported(ops_kind k);
/* Whether impl came from a plugin. */
int ops_plugin_is(const ops_impl *impl);
int ops_plugin_check(const ops_impl *impl, const ops_ctx *ctx, base_err *err);
int ops_plugin_bind(ops_table *t, ops_kind k, const ops_impl *impl, const char *path,
                    base_err *err);
void ops_plugin_unbind(ops_table *t);

#endif
