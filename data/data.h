// Everything of loom's data module: datasets, readers, samplers, DataLoader.
//
//   #include "data/data.h"
//   using namespace loom;
//   data::DataLoader loader(data::FashionMnist::train(), {.batch_size = 256, .shuffle = true});
//   for (auto& [x, y] : loader.epoch(0)) { /* x: (256, 1, 28, 28), y: (256) */ }
#pragma once

#include "data/char_corpus.h"
#include "data/char_dataset.h"
#include "data/char_vocab.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/distributed_sampler.h"
#include "data/fashion_mnist.h"
#include "data/fortunes.h"
#include "data/gaussian_blobs.h"
#include "data/idx.h"
#include "data/idx_parser.h"
#include "data/sampler.h"
#include "data/tensor_dataset.h"
