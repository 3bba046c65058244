"""Built-in plugins, one per method family; each registers its components through the
``pyterrier_sci.components`` entry-point group (see ``setup.cfg``)."""
