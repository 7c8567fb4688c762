export declare const importLoader: string;
export declare const loader: string;
export declare const preload: boolean;
export declare const testFileExtensions: string[];
