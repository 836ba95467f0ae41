
classifyplease refund me