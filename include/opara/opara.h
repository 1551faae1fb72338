#pragma once

// The whole public C++ API of opara.
#include "opara/compiled_model.h"
#include "opara/costs.h"
#include "opara/cpu_parallel_executor.h"
#include "opara/cuda_graph_executor.h"
#include "opara/eager_executor.h"
#include "opara/error.h"
#include "opara/graph.h"
#include "opara/graph_analysis.h"
#include "opara/load.h"
#include "opara/model_inputs.h"
#include "opara/outputs.h"
#include "opara/plan.h"
#include "opara/record_shapes.h"
#include "opara/reference_forward.h"
#include "opara/schedule.h"
