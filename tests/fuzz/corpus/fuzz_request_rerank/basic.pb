
rerankfresh breadThe baker sells bread.Children skip stones.