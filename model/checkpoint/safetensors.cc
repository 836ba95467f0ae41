#include "model/checkpoint/safetensors.h"
