"""cntkio's internals, private by path: the public doors are ``cntkio`` and its face modules (``cntkio.io``,
``cntkio.torch``, ``cntkio.jax``, ``cntkio.ray``, ``cntkio.transforms``, ``cntkio.htk``, ``cntkio.equal_steps``,
``cntkio.brainscript``). Layers, each importing only those below it:

common → formats → corpus → order → assemble → reading → api → compat, config, integrations → cli"""
