#pragma once

// What a host step hands to the graphs captured after it. Those graphs read its results at the
// addresses they were captured with, so each run's results are copied into the first run's
// buffers, which works while they keep their structure, shapes and dtypes (and non-tensor values
// stay the same, as the graphs were captured with them as constants).

#include <ATen/core/ivalue.h>

namespace opara {

// Whether `fresh` can be copied into `captured`: tensors of the same shape and dtype, lists and
// tuples of such element by element, anything else equal. When a captured graph reads the value
// (`read_by_a_graph`), its CPU tensors must also hold the same values: the capture baked them in.
bool result_fits(const c10::IValue& captured, const c10::IValue& fresh, bool read_by_a_graph = false);

// Copies the tensors of `result` into those of `slot` (which it fits), asynchronously on the
// current stream; non-tensor values were captured as they are and are left alone.
void copy_into_slot(const c10::IValue& slot, const c10::IValue& result);

// `value` with every tensor in it (lists and tuples too) cloned: buffers of its own.
c10::IValue clone_tensors(const c10::IValue& value);

}  // namespace opara
