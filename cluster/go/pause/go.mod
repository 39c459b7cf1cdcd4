module hub.local/cluster/pause

go 1.24.0
