#pragma once

// The whole public C++ API of opara: load a model into a Graph, plan it, profile it, compile it
// (Options in, CompiledStats out) and run it; errors are opara::Error; version() says which torch it was built for.
#include "opara/compiled_model.h"
#include "opara/compiled_regions.h"
#include "opara/error.h"
#include "opara/graph.h"
#include "opara/graph_set.h"
#include "opara/load.h"
#include "opara/model_profiler.h"
#include "opara/options.h"
#include "opara/package.h"
#include "opara/placement.h"
#include "opara/plan.h"
#include "opara/profile.h"
#include "opara/version.h"
