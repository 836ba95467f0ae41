#include "model/checkpoint/model_config.h"
