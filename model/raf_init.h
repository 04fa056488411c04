#pragma once

namespace srformer {

// Where RAF parameters come from when a model is loaded.
enum class RafInit {
  kFromCheckpoint,  // the checkpoint must hold them (serving, training)
  kCreateMissing,   // those it lacks are created (a plain checkpoint converted to SRformer)
  // all are created anew, those it holds dropped: a checkpoint whose attention never used them (the
  // authors' modules save them with full attention too) converted with an initialisation asked for
  kCreateAll,
};

}  // namespace srformer
