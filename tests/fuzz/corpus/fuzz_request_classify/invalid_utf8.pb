
classifyfinecaf√(