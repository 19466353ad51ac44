/* libzinc.so is zinc_core linked whole; this file only gives the target a source. */
