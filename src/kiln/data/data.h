#pragma once
// kiln::data: the input pipeline of the Trainer — datasets from files, label
// maps, tokenized features, collators, the DataLoader and the DeviceLoader.
#include "kiln/data/collator.h"
#include "kiln/data/dataset.h"
#include "kiln/data/features.h"
#include "kiln/data/labels.h"
#include "kiln/data/loader.h"

