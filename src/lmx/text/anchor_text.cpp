// placeholder so the layer library is never empty.
namespace lmx { void layer_anchor_text() {} }
