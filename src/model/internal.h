/* Private to the model module. */
#ifndef TITAN_MODEL_INTERNAL_H
#define TITAN_MODEL_INTERNAL_H

#include "model.h"

int model_layout(model *m, base_err *err);

#endif
