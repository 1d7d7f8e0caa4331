"""The status topic: the document each instance publishes (``document``), the publisher
inside an instance (``publisher``), and the application view readers build from the documents."""
