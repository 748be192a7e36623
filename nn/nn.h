// Everything in loom::nn: modules, layers, functional ops, initialisation,
// checkpoints.
#pragma once

#include "nn/float8_training.h"
#include "nn/functional.h"
#include "nn/init.h"
#include "nn/layers/attention.h"
#include "nn/layers/basic.h"
#include "nn/layers/container.h"
#include "nn/layers/conv.h"
#include "nn/layers/linear.h"
#include "nn/layers/lstm.h"
#include "nn/layers/normalization.h"
#include "nn/layers/pooling.h"
#include "nn/module.h"
