"""One thin script per DVC stage: load the composed config, call the library, write outputs."""
