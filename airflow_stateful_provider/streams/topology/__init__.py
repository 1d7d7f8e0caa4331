"""The topology: sources, processors, sinks and the store builders they use.

A topology describes an application; nothing runs until a task instantiates it. The DSL
builds one; the runtime, the assignor and the internal topics read it.
"""
