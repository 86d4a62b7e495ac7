/* Private to the checkpoint module. */
#ifndef TITAN_CHECKPOINT_INTERNAL_H
#define TITAN_CHECKPOINT_INTERNAL_H

#include <jansson.h>

#include "checkpoint.h"

/* Writes v to path atomically as Python's json.dumps(v, indent=2, sort_keys=True) + "\n"
 * would (the layout transformers uses for config.json and model.safetensors.index.json),
 * reals with the fewest digits that read back exactly. */
int ckpt_write_json(const char *path, json_t *v, base_err *err);

#endif
